#!/bin/bash
# call C (attn, alone on the GPU; <= 75 s): 1) ab.py: the branch's wgmma forward and
# backward beside main's at 319bf2d (session 22's), one process, graph-replayed, with
# cuDNN's (the figure that matters); 2) sweep.py: the forward's tiles at the three wgmma
# shapes with this code (the default by T first); 3) the backward's tile pairs at D 128.
S=bench/h200-2026-12-03-s23/attn
date -u | tee $OUT/bench_date.txt
timeout 28 python3 $S/ab.py --reps 5 2>&1 | grep -v "Warning\|warn(" | tee $OUT/ab.log
echo "ab done at $SECONDS s" | tee -a $OUT/ab.log
timeout 27 python3 $S/sweep.py --reps 5 2>&1 | grep -v "Warning\|warn(" | tee $OUT/sweep.log
echo "sweep done at $SECONDS s" | tee -a $OUT/sweep.log
timeout 14 python3 $S/sweep.py --backward --reps 5 2>&1 | grep -v "Warning\|warn(" | tee $OUT/sweep_bwd.log
echo "bench.sh done at $SECONDS s" | tee -a $OUT/sweep_bwd.log
