#!/bin/bash
# call C (attn, <= 50 s): graph ms at andrea-120m, D 128, andrea-12m, T 4096 with the op's
# backward routed (the op's fwd+bwd in one graph), each wgmma variant checked against
# mma.sync's; SDPA (graph) at D 128 and andrea-12m (call A timed it at andrea-120m, T 4096)
date -u | tee $OUT/bench_date.txt
timeout 47 python3 bench/h200-2026-12-03-s20/attn/time_attn.py --reps 5 --variants C \
  --shapes 120m d128 12m 4096 --sdpa d128 12m 2>&1 | grep -v "Warning\|warn(" | tee $OUT/time_attn.log
