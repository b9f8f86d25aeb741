#!/bin/bash
# call A (attn, alone on the GPU): tools/bench.py --only attention (through the kernel
# cache test.sh filled): the op's forward and forward + backward captured in a graph
# against SDPA's flash and cuDNN backends captured the same way, and every kernel eager,
# at the shapes, with TFLOP/s.
S=bench/h200-2026-12-03-s23/attn
date -u | tee $OUT/bench_date.txt
timeout 115 python3 $S/attention_bench.py --reps 10 --out $OUT/attention.md 2>&1 \
  | grep -v "Warning\|warn(" | tee $OUT/bench_attention.log
