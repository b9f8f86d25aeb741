# call B, beside the helpers' tests: converge.py's host time at andrea-12m under cProfile
# (its microgpt wall time has run 11-27 ms a step above the captured step)
D=$PWD/.devtree/data
timeout 160 python3 -m cProfile -o $OUT/converge12m.prof tools/converge.py --config andrea-12m --data $D --tokenizer $D/tokenizer.json --steps 300 --batch-size 64 --lr 1e-3 --warmup 50 --seeds 0 1 --eval-every 150 --curve-windows 64 --log-every 25 --no-torch-compile --cache-dir /tmp/mgcache --out $OUT/conv12m > $OUT/conv12m.log 2>&1
echo "converge rc $?" >> $OUT/conv12m.log
python3 -c "
import pstats; p = pstats.Stats('$OUT/converge12m.prof'); p.sort_stats('cumulative').print_stats(45)" > $OUT/conv12m-prof.txt 2>&1
python3 -c "
import pstats; p = pstats.Stats('$OUT/converge12m.prof'); p.sort_stats('tottime').print_stats(30)" >> $OUT/conv12m-prof.txt 2>&1
