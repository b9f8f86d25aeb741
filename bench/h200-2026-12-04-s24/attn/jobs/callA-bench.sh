#!/bin/bash
# call A (attn, alone on the GPU, <= 90 s): 1) ab.py: this branch's (main's) wgmma forward
# and backward beside session 22's (319bf2d, main_kernels/) in one process, graph-replayed,
# with SDPA cuDNN's; 2) tools/bench.py --only attention through the kernel cache that
# test.sh filled (attention_bench.py): the op's forward and forward + backward captured in
# a graph against SDPA's backends, at the five shapes (the README table).
S=bench/h200-2026-12-04-s24/attn
date -u | tee $OUT/bench_date.txt
cat $S/jobs/commit.txt 2>/dev/null
# the tree it ran, to match with the branch's commits (no git history here)
sha1sum kernels/attention/*.py tests/test_kernels_attention*.py $S/*.py | tee $OUT/tree.sha1
echo "+ python3 $S/ab.py --reps 5" | tee $OUT/ab.log
timeout 32 python3 $S/ab.py --reps 5 2>&1 | grep -v "Warning\|warn(" | tee -a $OUT/ab.log
echo "ab done at $SECONDS s" | tee -a $OUT/ab.log
echo "+ python3 $S/attention_bench.py --reps 10 --out \$OUT/attention.md" | tee $OUT/bench_attention.log
timeout $((86 - SECONDS)) python3 $S/attention_bench.py --reps 10 --out $OUT/attention.md 2>&1 \
  | grep -v "Warning\|warn(" | tee -a $OUT/bench_attention.log
echo "bench.sh done at $SECONDS s" | tee -a $OUT/bench_attention.log
