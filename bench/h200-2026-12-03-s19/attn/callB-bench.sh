#!/bin/bash
# call B (attn, <= 50 s): the wgmma backward (4 to 8 stages) against mma.sync's backward,
# graph replays, each variant checked first; cuDNN and SDPA flash at andrea-120m
set -x
date -u | tee $OUT/bench_date.txt
timeout 47 python3 jobs_attn/time_bwd.py --reps 10 --sdpa 120m 2>&1 | grep -v "Warning\|warn(" | tee $OUT/time_bwd.log
