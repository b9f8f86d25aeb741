#!/bin/bash
# s20-decode call C (40 s): the issue's figures on the tree to land, session 19's command
# (tools/bench.py --only generate's section in the profile's process, its kernel cache
# shared); then the sweep of MMA_UNROLL : MMA_UNROLL_MANY (2:2 session 19's, 3:3, 3:6 the
# tree's) at batch 16 and 8, where the rule picks
export PYTHONUNBUFFERED=1
D=bench/h200-2026-12-03-s20/decode
F="NumbaPerformanceWarning\|warn(errors"
T0=$(date +%s)
left() { echo $(( $1 - $(date +%s) + T0 )); }
timeout 26 python3 tools/profile_decode.py --cases andrea-120m:1 --generate "$OUT/generate.md" \
    --out "$OUT/profile_120m_b1.md" 2>&1 | grep -v "$F" | tee "$OUT/profile_generate.log"
echo "profile rc ${PIPESTATUS[0]} at $(( $(date +%s) - T0 )) s" | tee -a "$OUT/profile_generate.log"
[ "$(left 39)" -gt 4 ] && timeout "$(left 39)" python3 $D/rule_sweep.py "$OUT/sweep.md" \
    --cases andrea-120m:16 andrea-120m:8 2>&1 | grep -v "$F" | tee "$OUT/sweep.log"
echo "done at $(( $(date +%s) - T0 )) s" | tee -a "$OUT/sweep.log"
