#!/bin/bash
# Session 14, call 3: the captured GEMMs old then new again at --reps 10 (one product of
# call 2 outside 2%: is it noise?); converge andrea-120m seeds 1 and 2 (issue 31); the
# trainer's start-up under cProfile on a warm kernel cache (issue 29); the step with biases
# profiled op by op (issue 32's 0.919x).
export PYTHONUNBUFFERED=1 MICROGPT_CACHE_DIR=/tmp/mgcache
J=$PWD/bench/h200-2026-12-02     # session 13's parity2.py, cached.py, profile_start.py
ROOT=$PWD; T0=$(date +%s); D=$ROOT/.devtree/data
stamp() { echo "=== $(( $(date +%s) - T0 )) s: $*" | tee -a $OUT/summary.log; }
export PYTHONPATH=/tmp/site:$ROOT
tar -C /tmp -xzf .devtree/caches.tgz
stamp "A: captured GEMMs, old tree"
(cd .devtree/old && PYTHONPATH=/tmp/site:$PWD timeout 100 python3 tools/bench.py --only gemm --gemm-captured --reps 10 --out $OUT/gemm_old.md > /tmp/gemm_old.log 2>&1)
stamp "A: captured GEMMs, new tree"
timeout 80 python3 $J/cached.py tools/bench.py --only gemm --gemm-captured --reps 10 --out $OUT/gemm_new.md > /tmp/gemm_new.log 2>&1
stamp "B: converge andrea-120m, seeds 1 2"
timeout 270 python3 tools/converge.py --config andrea-120m --vocab-size 4096 --data $D --tokenizer $D/tokenizer.json --steps 1000 --batch-size 16 --lr 6e-4 --warmup 50 --seeds 1 2 --eval-every 250 --curve-windows 32 --log-every 50 --no-torch-compile --out $OUT/andrea-120m 2>&1 | grep -v -E "Warning|warn\(" > $OUT/converge.log
tail -n 22 $OUT/converge.log | tee -a $OUT/summary.log
stamp "C: start-up profile, warm"
timeout 50 python3 $J/profile_start.py --config andrea-120m --vocab-size 4096 --data $D --tokenizer $D/tokenizer.json --batch-size 16 --steps 3 --cache-dir /tmp/mgcache --out /tmp/run1 > $OUT/profile_start.log 2>&1
head -n 60 $OUT/profile_start.log | tail -n 50 >> $OUT/summary.log
stamp "D: the step with biases, op by op"
timeout $(( 590 - $(date +%s) + T0 )) python3 $J/cached.py tools/profile_step.py --config andrea-120m --bias --out $OUT/prof_bias.md > /tmp/prof_bias.log 2>&1
stamp "done"
