#!/bin/bash
# call B (attn, <= 80 s, alone on the GPU). 1) the wgmma forward's tiles (the defaults with
# the walk in 32-bit counts; a producer warpgroup donating its registers to two or three
# computing warpgroups, ping-pong in a ring or not) at andrea-120m, T 4096 and D 128,
# graph-replayed, each checked against mma.sync's forward, beside SDPA's cuDNN and flash
# forwards in the same process; 2) the op's forward + backward and each pass (routed
# defaults) at the issue's four shapes beside SDPA (session 21's time_attn.py).
S=bench/h200-2026-12-03-s21/attn
date -u | tee $OUT/bench_date.txt
timeout 38 python3 bench/h200-2026-12-03-s22/attn/time_fwd.py --reps 5 --set B 2>&1 \
  | grep -v "Warning\|warn(" | tee $OUT/time_fwd.log
timeout 36 python3 $S/time_attn.py --reps 5 --variants S --shapes 120m 4096 d128 12m 2>&1 \
  | grep -v "Warning\|warn(" | tee $OUT/time_attn.log
