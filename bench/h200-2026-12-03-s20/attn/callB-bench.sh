#!/bin/bash
# call B (attn, <= 60 s): graph ms of the passes (branch s20-attn) at andrea-120m, D 128, T 4096,
# andrea-12m, each wgmma variant checked against mma.sync's; SDPA (graph) at D 128 and andrea-12m
# (call A timed it at andrea-120m and T 4096)
date -u | tee $OUT/bench_date.txt
timeout 57 python3 bench/h200-2026-12-03-s20/attn/time_attn.py --reps 5 --variants B \
  --shapes 120m d128 4096 12m --sdpa d128 12m 2>&1 | grep -v "Warning\|warn(" | tee $OUT/time_attn.log
