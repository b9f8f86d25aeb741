#!/bin/bash
# session 26's second call (gemm, issue 28), alone on the GPU: both configs' captured steps
# profiled beside torch.compile's in one process each (tools/profile_step.py
# --torch-compile): where the step targets stand on this call's card.
clean() { grep --line-buffered -v "Warning\|warn(\|^$" ; }
{ echo "tree: $(cat commit.txt)"; date -u; nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader; } | tee $OUT/bench.log
stamp() { echo "=== $SECONDS s: $*" | tee -a $OUT/bench.log; }
timeout -k 2 32 python3 tools/profile_step.py --config andrea-12m --batch-size 64 --seq-len 256 \
  --precision bf16 --torch-compile --out $OUT/profile_12m.md 2>&1 | clean > $OUT/profile_12m.log
stamp profile_12m
left=$((88 - SECONDS)); [ $left -gt 8 ] && timeout -k 2 $left python3 tools/profile_step.py \
  --config andrea-120m --batch-size 16 --seq-len 1024 --precision bf16 --torch-compile \
  --out $OUT/profile_120m.md 2>&1 | clean > $OUT/profile_120m.log; stamp profile_120m
