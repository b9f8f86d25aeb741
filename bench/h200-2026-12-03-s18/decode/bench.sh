#!/bin/bash
# s18-decode call A: tools/bench.py's generate rows (through profile_decode --generate, which
# shares the kernel cache test.sh filled) after the step's profile at andrea-120m batch 1;
# the sampler's launch time, session 14's top-k bisection against this tree's byte
# histograms; then transformers' rows of the same cases in what is left.
export PYTHONUNBUFFERED=1
HERE=$(dirname "$0")
T0=$(date +%s)
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader
timeout 45 python3 tools/profile_decode.py --cases andrea-120m:1 --generate "$OUT/generate.md" \
    --out "$OUT/profile_120m_b1.md" 2>&1 | tee "$OUT/profile_generate.log"
echo "rc ${PIPESTATUS[0]} at $(( $(date +%s) - T0 )) s"
timeout 18 python3 "$HERE/sampler_ab.py" 2>&1 | tee "$OUT/sampler_ab.log"
echo "rc ${PIPESTATUS[0]} at $(( $(date +%s) - T0 )) s"
left=$(( 86 - $(date +%s) + T0 ))
timeout "$left" python3 "$HERE/hf_rows.py" 2>&1 | tee "$OUT/hf_rows.log"
echo "rc ${PIPESTATUS[0]} at $(( $(date +%s) - T0 )) s"
