#!/bin/bash
# call B (attn, <= 80 s, alone on the GPU): the wgmma forward's tiles (the defaults with
# the walk in 32-bit counts, and with the lazy max; a producer warpgroup donating its
# registers to two or three computing warpgroups, ping-pong in a ring or not) at
# andrea-120m, T 4096 and D 128, graph-replayed (20 launches, best of 5), each checked
# against mma.sync's forward, beside main's kernel with its default tile (hopper_base.py,
# the baseline of this branch's changes) and SDPA's cuDNN and flash forwards, one process.
date -u | tee $OUT/bench_date.txt
timeout 76 python3 bench/h200-2026-12-03-s22/attn/time_fwd.py --reps 5 --set B 2>&1 \
  | grep -v "Warning\|warn(" | tee $OUT/time_fwd.log
