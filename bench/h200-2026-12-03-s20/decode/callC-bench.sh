#!/bin/bash
# s20-decode call C (40 s): the figures on the tree to land (the generate bench's
# section, its kernel cache shared); then the sweep of MMA_UNROLL : MMA_UNROLL_MANY :
# attention_decode's keys a split (2:2:128 session 19's, 3:6:128 the tree's, 3:6:256) at
# andrea-120m batch 1 and 16
export PYTHONUNBUFFERED=1
D=bench/h200-2026-12-03-s20/decode
F="NumbaPerformanceWarning\|warn(errors"
T0=$(date +%s)
left() { echo $(( $1 - $(date +%s) + T0 )); }
timeout 21 python3 $D/generate_bench.py "$OUT/generate.md" 2>&1 | grep -v "$F" \
    | tee "$OUT/generate.log"
echo "generate rc ${PIPESTATUS[0]} at $(( $(date +%s) - T0 )) s" | tee -a "$OUT/generate.log"
[ "$(left 39)" -gt 4 ] && timeout "$(left 39)" python3 $D/rule_sweep.py "$OUT/sweep.md" 2>&1 \
    | grep -v "$F" | tee "$OUT/sweep.log"
echo "done at $(( $(date +%s) - T0 )) s" | tee -a "$OUT/sweep.log"
