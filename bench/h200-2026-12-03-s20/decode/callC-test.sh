#!/bin/bash
# s20-decode call C: the tree to land (skinny MMA_UNROLL 3, 6 from 9 rows; the sampling
# kernels' first pass one device function): the GPU tests of the skinny products (at
# MMA_UNROLL 2, 3, 6), generation, decoding and sampling; generations captured = eager in
# a process of their own; beside them, the bench's kernel cache warmed (the profile and
# generate bench with 2 tokens, the sweep's variants)
export MICROGPT_TEST_DEVICE=gpu MICROGPT_GPU_EXAMPLES=2 PYTHONUNBUFFERED=1
D=bench/h200-2026-12-03-s20/decode
F="NumbaPerformanceWarning\|warn(errors\|PytestBenchmarkWarning\|warner("
T0=$(date +%s)
(MICROGPT_TEST_DEVICE= timeout 140 python3 tools/profile_decode.py --cases andrea-120m:1 \
     --generate "$OUT/warm_generate.md" --tokens 2 > "$OUT/warm_profile.log" 2>&1
 echo "warm profile rc $? at $(( $(date +%s) - T0 )) s" >> "$OUT/warm_profile.log"
 MICROGPT_TEST_DEVICE= timeout $(( 142 - $(date +%s) + T0 )) python3 $D/rule_sweep.py \
     "$OUT/warm_sweep.md" --tokens 2 --cases andrea-120m:16 andrea-120m:8 > "$OUT/warm_sweep.log" 2>&1
 echo "warm sweep rc $? at $(( $(date +%s) - T0 )) s" >> "$OUT/warm_sweep.log") &
(MICROGPT_TEST_DEVICE= timeout 130 python3 bench/h200-2026-12-03-s19/decode/gen_check.py \
     > "$OUT/gen_check.log" 2>&1; echo "gen_check rc $? at $(( $(date +%s) - T0 )) s" >> "$OUT/gen_check.log") &
timeout 125 python3 -m pytest -q -n 4 -p no:cacheprovider tests/test_kernels_skinny.py \
    tests/test_generate.py tests/test_kernels_decode.py tests/test_kernels_sampling.py \
    --durations=5 2>&1 | grep -v "$F" | tee "$OUT/test_main.log"
echo "pytest rc ${PIPESTATUS[0]} (124: timed out) at $(( $(date +%s) - T0 )) s" | tee -a "$OUT/test_main.log"
wait
cat "$OUT/gen_check.log" "$OUT/warm_profile.log" "$OUT/warm_sweep.log" | grep -v "$F"
