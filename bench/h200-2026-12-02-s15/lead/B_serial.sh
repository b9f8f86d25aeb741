# call B, alone on the GPU: GPT-2-XL geometry's start-up (issue 29), the deterministic step's cost (issue 31)
D=$PWD/.devtree/data
timeout 150 python3 tools/startup_time.py --runs cold warm warm --out $OUT/startup.md --title "GPT-2-XL geometry (48 x 1600, 25 heads), vocabulary 4096, token shards" -- --config andrea-120m --n-layer 48 --d-model 1600 --n-head 25 --vocab-size 4096 --batch-size 4 --data $D --tokenizer $D/tokenizer.json --steps 3 --cache-dir /tmp/mgs > $OUT/startup-xl.log 2>&1
echo "startup rc $?" >> $OUT/startup-xl.log
timeout 120 python3 tools/bench.py --only steps --bf16-only --no-torch-compile --reps 10 --out $OUT/steps.md > $OUT/steps.log 2>&1
echo "steps rc $?" >> $OUT/steps.log
