#!/bin/bash
# call B (attn, <= 30 s): the wgmma backward (4 and 8 stages) against mma.sync's at andrea-120m,
# graph replays, each variant checked first
timeout 28 python3 jobs_attn/time_bwd.py --reps 10 --shapes 120m 2>&1 | grep -v "Warning\|warn(" | tee $OUT/time_bwd.log
