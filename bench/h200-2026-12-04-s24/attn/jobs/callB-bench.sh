#!/bin/bash
# call B (attn, alone on the GPU, <= 90 s): 0) ab.py: this tree's default passes (the dk/dv
# pass's statistics before its products, both passes' prologue copies past the block's
# barrier) beside main's at 133880f, with cuDNN's; 1) sweep.py --backward: the backward's tile
# pairs at andrea-120m and D 128 (the donating producer warpgroup's among them), each
# against the defaults' gradients, graph-replayed, beside cuDNN's in the same process;
# 2) sweep.py: the forward's tiles at andrea-120m (the default first; no ping-pong and
# persistent blocks), with cuDNN's.
S=bench/h200-2026-12-04-s24/attn
date -u | tee $OUT/bench_date.txt
cat $S/jobs/commit.txt 2>/dev/null
# the tree it ran, to match with the branch's commits (no git history here)
sha1sum kernels/attention/*.py tests/test_kernels_attention*.py $S/*.py | tee $OUT/tree.sha1
echo "+ python3 $S/ab.py --reps 5" | tee $OUT/ab.log
timeout 25 python3 $S/ab.py --reps 5 2>&1 | grep -v "Warning\|warn(" | tee -a $OUT/ab.log
echo "ab done at $SECONDS s" | tee -a $OUT/ab.log
echo "+ python3 $S/sweep.py --backward --reps 5" | tee $OUT/sweep_bwd.log
timeout 40 python3 $S/sweep.py --backward --reps 5 2>&1 | grep -v "Warning\|warn(" | tee -a $OUT/sweep_bwd.log
echo "sweep --backward done at $SECONDS s" | tee -a $OUT/sweep_bwd.log
echo "+ python3 $S/sweep.py --shapes 120m --reps 5" | tee $OUT/sweep.log
timeout $((86 - SECONDS)) python3 $S/sweep.py --shapes 120m --reps 5 2>&1 | grep -v "Warning\|warn(" | tee -a $OUT/sweep.log
echo "bench.sh done at $SECONDS s" | tee -a $OUT/sweep.log
