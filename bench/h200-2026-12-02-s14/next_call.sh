#!/bin/bash
# For the next session's first call (not run yet): the measurements the open issues wait
# on, each under its own timeout, in the order of what they settle. Needs .devtree/data
# (README); ~560 s with a fresh machine's compiles.
export PYTHONUNBUFFERED=1 MICROGPT_CACHE_DIR=/tmp/mgcache
ROOT=$PWD; T0=$(date +%s); D=$ROOT/.devtree/data
stamp() { echo "=== $(( $(date +%s) - T0 )) s: $*" | tee -a $OUT/summary.log; }
export PYTHONPATH=/tmp/site:$ROOT
S="--data $D --tokenizer $D/tokenizer.json --steps 3 --cache-dir /tmp/mgcache"
stamp "29: andrea-120m cold (compile-ahead) then warm; GPT-2-XL geometry warm twice"
timeout 120 python3 tools/startup_time.py --runs cold warm --out $OUT/startup.md -- --config andrea-120m --vocab-size 4096 --batch-size 16 $S > $OUT/startup-120m.log 2>&1
timeout 120 python3 tools/startup_time.py --runs warm warm --out $OUT/startup.md -- --config andrea-120m --n-layer 48 --d-model 1600 --n-head 25 --vocab-size 4096 --batch-size 4 $S > $OUT/startup-xl.log 2>&1
stamp "31: the deterministic step's cost (bench steps, bf16 rows)"
timeout 120 python3 tools/bench.py --only steps --bf16-only --no-torch-compile --reps 10 --out $OUT/steps.md > $OUT/steps.log 2>&1
stamp "31: fp32 against bf16, andrea-120m, 500 steps, seed 0"
for p in fp32 bf16; do
  timeout 100 python3 tools/converge.py --config andrea-120m --vocab-size 4096 --data $D --tokenizer $D/tokenizer.json --steps 500 --batch-size 16 --lr 6e-4 --warmup 50 --seeds 0 --eval-every 250 --curve-windows 32 --log-every 50 --no-torch-compile --precision $p --out $OUT/andrea-120m-500-$p > $OUT/converge-$p.log 2>&1
done
stamp done
