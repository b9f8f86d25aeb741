#!/bin/bash
# bias (issue 32), session 16, alone on the GPU (kernels cached by test.sh): the plain and
# biased steps in one process (issue 32's 0.97x), micro.py (the fused sums against what
# they replace), then the biased step's profile while the limit lasts.
R=bench/h200-2026-12-02-s16/bias; C=bench/h200-2026-12-02/cached.py
F="NumbaPerformanceWarning\|warn(errors\|^  warnings.warn"
T0=$(date +%s); stamp() { echo "=== $(( $(date +%s) - T0 )) s: $*" | tee -a $OUT/summary.log; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw --format=csv,noheader | tee $OUT/gpu.txt
stamp "step variants ($(git rev-parse --short HEAD 2>/dev/null))"
timeout 34 python3 $C tools/step_variants.py --reps 10 --no-accum --out $OUT/step_variants.md 2>&1 \
  | grep -v "$F" | tail -n 4
cat $OUT/step_variants.md 2>/dev/null | tail -n 4 | tee -a $OUT/summary.log
stamp "micro"
timeout 20 python3 $C $R/micro.py --sweep 2>&1 | grep -v "$F" | tee $OUT/micro.md
stamp "profile --bias"
timeout $(( 87 - $(date +%s) + T0 )) python3 $C tools/profile_step.py --config andrea-120m --bias \
  --out $OUT/prof_bias.md 2>&1 | grep -v "$F" | head -n 6
stamp "done"
