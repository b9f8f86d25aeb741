#!/bin/bash
# mem, call C (alone on the GPU, 106 s at most): microgpt's bf16 step graph with the LayerNorms' and
# GELU's outputs kept (the default) and recomputed (--recompute on): tokens/s and the device
# memory it holds, one process a geometry, GPT-2 XL first (the geometry where the target is
# at stake), the kernels from the cache the tests' phase filled (warm.py)
date -u > $OUT/bench_date.txt
T0=$(date +%s)
for g in gpt2-xl:42 gpt2-medium:28 andrea-120m:22; do
  s=${g#*:}; g=${g%:*}
  timeout $s python3 tools/bench.py --only steps --bf16-only --reps 20 --steps-geometries $g \
    --steps-runs ours_bf16_graph ours_bf16_graph_recomputed --out $OUT/steps-$g.md 2>&1 \
    | grep -v "NumbaPerformanceWarning\|warn(errors\|^$" | tail -8 > $OUT/steps-$g.log
  echo "=== $(( $(date +%s) - T0 )) s: $g" | tee -a $OUT/bench_times.log
done
# the cross-entropy's launch shape at andrea-12m's vocabulary (4096: 23% of the copy rate in
# call A's step profile) and andrea-120m's, the LayerNorm backward's at both widths
timeout 14 python3 bench/h200-2026-12-03-s23/mem/bw.py --geometries andrea-12m andrea-120m \
  --only crossentropy layernorm_backward 2>&1 | grep -v "NumbaPerformanceWarning\|warn(errors\|^$" \
  > $OUT/bw.md
echo "=== $(( $(date +%s) - T0 )) s: bw" | tee -a $OUT/bench_times.log
cat $OUT/steps-*.log $OUT/bw.md
