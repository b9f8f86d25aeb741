#!/bin/bash
# Session 26 call B (attn, alone on the GPU, <= 90 s): ab.py, the wgmma backward's variants
# in one process, graph-replayed, best of 5 replays in each of two rounds (the variants in
# turn, then reversed), beside cuDNN's: main's kernels; this tree (the donating producer
# warpgroup routed); session 24's b1 and b2 each alone on main's tiles; b2 on this tree's
# tiles; this tree with candidate tiles: the dq pass (1, 64, 4, 2, producer) at D 64
# (dq2), and one computing warpgroup with a donating producer, two blocks an SM, for the dq
# pass (dq2d) or the dk/dv pass (kv2d).
S=bench/2026-12-06-s26/attn
date -u | tee $OUT/bench_date.txt
echo "+ python3 $S/ab.py --reps 5 --shapes 120m d128 4096" | tee $OUT/ab.log
timeout 86 python3 $S/ab.py --reps 5 --shapes 120m d128 4096 2>&1 | grep -v "Warning\|warn(" | tee -a $OUT/ab.log
echo "bench.sh done at $SECONDS s (rc ${PIPESTATUS[0]})" | tee -a $OUT/ab.log
