#!/bin/bash
# call A (attn, <= 80 s): graph ms of the passes at andrea-120m, T 4096, D 128, andrea-12m,
# the wgmma backward's variants checked against mma.sync's, SDPA flash and cuDNN beside
date -u | tee $OUT/bench_date.txt
timeout 76 python3 bench/h200-2026-12-03-s20/attn/time_attn.py --reps 10 2>&1 | grep -v "Warning\|warn(" | tee $OUT/time_attn.log
