#!/bin/bash
# s18-ce call B, alone on the GPU (kernels cached by test.sh): micro.py's AdamW against
# main's module in the same run, tools/bench.py's fused section (the copy, the
# cross-entropy staged and read twice, AdamW, PyTorch beside them), the step's profile.
D=bench/h200-2026-12-03-s18/ce; C=bench/h200-2026-12-02/cached.py; J=$(dirname "$0")
F="NumbaPerformanceWarning\|warn(errors\|^  warnings.warn"
T0=$(date +%s); stamp() { echo "=== $(( $(date +%s) - T0 )) s: $*" | tee -a $OUT/summary.log; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw --format=csv,noheader | tee $OUT/gpu.txt
stamp micro
timeout 30 python3 $C $D/micro.py copy bf16 adamw rest --adamw-main "$J/adamw_main.py" 2>&1 | grep -v "$F" \
    | tee "$OUT/micro.md"
stamp profile
timeout 15 python3 $C tools/profile_step.py --config andrea-120m --out $OUT/prof_step.md 2>&1 \
    | grep -v "$F" | tail -n 4
stamp fused
timeout $(( 88 - $(date +%s) + T0 )) python3 $C tools/bench.py --only fused --reps 10 \
    --out $OUT/fused.md 2>&1 | grep -v "$F" | tee $OUT/fused.log
stamp done
