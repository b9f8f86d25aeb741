#!/bin/bash
# call C (attn, alone on the GPU, <= 90 s): 1) ab.py: this tree's default passes beside
# main's at 133880f (session 24's start), one process, graph-replayed, with SDPA cuDNN's;
# 2) tools/bench.py --only attention's andrea-12m and head_dim 72 rows (not measured in call
# A: its limit held the table's first three), the op's graphs against SDPA's fastest.
S=bench/h200-2026-12-04-s24/attn
date -u | tee $OUT/bench_date.txt
cat $S/jobs/commit.txt 2>/dev/null
# the tree it ran, to match with the branch's commits (no git history here)
sha1sum kernels/attention/*.py tests/test_kernels_attention*.py $S/*.py | tee $OUT/tree.sha1
echo "+ python3 $S/ab.py --reps 5" | tee $OUT/ab.log
timeout 26 python3 $S/ab.py --reps 5 2>&1 | grep -v "Warning\|warn(" | tee -a $OUT/ab.log
echo "ab done at $SECONDS s" | tee -a $OUT/ab.log
echo "+ python3 $S/attention_bench.py --rows andrea-12m \"head_dim 72\" --reps 10 --out \$OUT/attention.md" | tee $OUT/bench_attention.log
timeout $((86 - SECONDS)) python3 $S/attention_bench.py --rows andrea-12m "head_dim 72" --reps 10 --out $OUT/attention.md 2>&1 \
  | grep -v "Warning\|warn(" | tee -a $OUT/bench_attention.log
echo "bench.sh done at $SECONDS s" | tee -a $OUT/bench_attention.log
