#!/bin/bash
# s19-decode call B: tools/bench.py's generate rows (through profile_decode --generate,
# which shares the trainer's kernel cache; the first token included), after the step's
# profile at andrea-120m batch 1; then the sampler's launches (greedy a kernel of its own)
export PYTHONUNBUFFERED=1
T0=$(date +%s)
F="NumbaPerformanceWarning\|warn(errors"
timeout 25 python3 tools/profile_decode.py --cases andrea-120m:1 --generate "$OUT/generate.md" \
    --out "$OUT/profile_120m_b1.md" 2>&1 | grep -v "$F" | tee "$OUT/profile_generate.log"
echo "rc ${PIPESTATUS[0]} at $(( $(date +%s) - T0 )) s"
left=$(( 29 - $(date +%s) + T0 ))
[ "$left" -gt 1 ] && timeout "$left" python3 bench/h200-2026-12-03-s19/decode/sampler_probe.py \
    2>&1 | grep -v "$F" | tee "$OUT/sampler_probe.log"
echo "done at $(( $(date +%s) - T0 )) s"
