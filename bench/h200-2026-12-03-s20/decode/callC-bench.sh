#!/bin/bash
# s20-decode call C: the issue's figures on the tree to land, session 19's command
# (tools/bench.py --only generate's section in the profile's process, its kernel cache
# shared; transformers beside it where importable); then the sweep of MMA_UNROLL :
# MMA_UNROLL_MANY (2:2 session 19's, 3:3, 3:6 the tree's) at batch 1, 8 and 16
export PYTHONUNBUFFERED=1
D=bench/h200-2026-12-03-s20/decode
F="NumbaPerformanceWarning\|warn(errors"
T0=$(date +%s)
left() { echo $(( $1 - $(date +%s) + T0 )); }
timeout 28 python3 tools/profile_decode.py --cases andrea-120m:1 --generate "$OUT/generate.md" \
    --out "$OUT/profile_120m_b1.md" 2>&1 | grep -v "$F" | tee "$OUT/profile_generate.log"
echo "profile rc ${PIPESTATUS[0]} at $(( $(date +%s) - T0 )) s" | tee -a "$OUT/profile_generate.log"
[ "$(left 49)" -gt 4 ] && timeout "$(left 49)" python3 $D/rule_sweep.py "$OUT/sweep.md" 2>&1 \
    | grep -v "$F" | tee "$OUT/sweep.log"
echo "done at $(( $(date +%s) - T0 )) s" | tee -a "$OUT/sweep.log"
