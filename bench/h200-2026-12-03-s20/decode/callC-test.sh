#!/bin/bash
# s20-decode call C: the tree to land (skinny MMA_UNROLL 3, 6 from 9 rows; the sampling
# kernels' first pass one device function; attention_decode's split size read at each
# launch): the GPU tests of the skinny products (at MMA_UNROLL 2, 3, 6), generation,
# decoding (andrea-120m's attention at 128 and 256 keys a split) and sampling;
# generations captured = eager in a process of their own; beside them, the bench's
# kernel cache warmed (the generate bench with 2 tokens, the sweep's variants)
export MICROGPT_TEST_DEVICE=gpu MICROGPT_GPU_EXAMPLES=2 PYTHONUNBUFFERED=1
D=bench/h200-2026-12-03-s20/decode
F="NumbaPerformanceWarning\|warn(errors\|PytestBenchmarkWarning\|warner("
T0=$(date +%s)
(MICROGPT_TEST_DEVICE= timeout 120 python3 $D/generate_bench.py "$OUT/warm_generate.md" 2 \
     > "$OUT/warm.log" 2>&1
 echo "warm generate rc $? at $(( $(date +%s) - T0 )) s" >> "$OUT/warm.log"
 MICROGPT_TEST_DEVICE= timeout $(( 142 - $(date +%s) + T0 )) python3 $D/rule_sweep.py \
     "$OUT/warm_sweep.md" --tokens 2 >> "$OUT/warm.log" 2>&1
 echo "warm sweep rc $? at $(( $(date +%s) - T0 )) s" >> "$OUT/warm.log") &
(MICROGPT_TEST_DEVICE= timeout 130 python3 bench/h200-2026-12-03-s19/decode/gen_check.py \
     > "$OUT/gen_check.log" 2>&1; echo "gen_check rc $? at $(( $(date +%s) - T0 )) s" >> "$OUT/gen_check.log") &
timeout 125 python3 -m pytest -q -n 4 -p no:cacheprovider tests/test_kernels_skinny.py \
    tests/test_generate.py tests/test_kernels_decode.py tests/test_kernels_sampling.py \
    --durations=5 2>&1 | grep -v "$F" | tee "$OUT/test_main.log"
echo "pytest rc ${PIPESTATUS[0]} (124: timed out) at $(( $(date +%s) - T0 )) s" | tee -a "$OUT/test_main.log"
wait
cat "$OUT/gen_check.log" "$OUT/warm.log" | grep -v "$F"
