# call A, beside the helpers' tests: the default corpus's tokens for andrea-120m (BPE at
# 50,304 on the standard library: the first run's data cost), and fp32 at 500 steps.
R=$PWD; D=$R/.devtree/data
( python3 -c "
import time; t=time.perf_counter()
from microgpt.data import load_tokens
load_tokens(None, None, 50304, '/tmp/mgs'); print('tokens for the default corpus at 50304:', round(time.perf_counter()-t,1), 's')" ) > $OUT/tokens50304.log 2>&1 &
timeout 190 python3 tools/converge.py --config andrea-120m --vocab-size 4096 --data $D --tokenizer $D/tokenizer.json --steps 500 --batch-size 16 --lr 6e-4 --warmup 50 --seeds 0 --eval-every 250 --curve-windows 32 --log-every 50 --no-torch-compile --precision fp32 --cache-dir /tmp/mgcache --out $OUT/andrea-120m-500-fp32 > $OUT/converge-fp32.log 2>&1
echo "converge fp32 rc $?" >> $OUT/converge-fp32.log
wait
