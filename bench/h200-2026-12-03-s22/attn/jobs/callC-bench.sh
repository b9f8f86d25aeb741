#!/bin/bash
# call C (attn, <= 30 s, alone on the GPU): the attention op as the step runs it (main's
# routing: the forward's defaults by T, the wgmma backward at every T) at andrea-120m, T
# 4096, D 128 and andrea-12m: forward, backward, both in one graph, beside SDPA cuDNN's
# forward and forward + backward, one process (graph-replayed, best of 5).
date -u | tee $OUT/bench_date.txt
timeout 28 python3 bench/h200-2026-12-03-s22/attn/time_op.py --reps 5 2>&1 \
  | grep -v "Warning\|warn(" | tee $OUT/time_op.log
