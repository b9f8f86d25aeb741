#!/bin/bash
# call A (attn, alone on the GPU): ab.py, this branch's wgmma forward and backward beside
# main's (319bf2d) in one process, graph-replayed, with cuDNN's; then tools/bench.py --only attention (through the kernel
# cache test.sh filled): the op's forward and forward + backward captured in a graph
# against SDPA's flash and cuDNN backends captured the same way, and every kernel eager,
# at the shapes, with TFLOP/s.
S=bench/h200-2026-12-03-s23/attn
date -u | tee $OUT/bench_date.txt
timeout 50 python3 $S/ab.py --reps 5 2>&1 | grep -v "Warning\|warn(" | tee $OUT/ab.log
timeout 65 python3 $S/attention_bench.py --reps 10 --out $OUT/attention.md 2>&1 \
  | grep -v "Warning\|warn(" | tee $OUT/bench_attention.log
