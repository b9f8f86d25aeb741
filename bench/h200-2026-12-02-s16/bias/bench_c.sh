#!/bin/bash
# bias (issue 32), session 16, call C, alone on the GPU: call B's figure again on the
# final tree (the plain and biased steps in one process), then the biased step's profile.
C=bench/h200-2026-12-02/cached.py
F="NumbaPerformanceWarning\|warn(errors\|^  warnings.warn"
T0=$(date +%s); stamp() { echo "=== $(( $(date +%s) - T0 )) s: $*" | tee -a $OUT/summary.log; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw --format=csv,noheader | tee $OUT/gpu.txt
stamp "step variants"
timeout 40 python3 $C tools/step_variants.py --reps 10 --no-accum --out $OUT/step_variants.md 2>&1 \
  | grep -v "$F" | tail -n 4
tail -n 4 $OUT/step_variants.md 2>/dev/null | tee -a $OUT/summary.log
stamp "profile --bias"
timeout $(( 58 - $(date +%s) + T0 )) python3 $C tools/profile_step.py --config andrea-120m --bias \
  --out $OUT/prof_bias.md 2>&1 | grep -v "$F" | head -n 6
stamp "done"
