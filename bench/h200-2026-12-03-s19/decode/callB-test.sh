#!/bin/bash
# s19-decode call B: the GPU tests of sampling (greedy a kernel of its own), generation and
# decoding; beside them, generations in a process of their own (captured = eager at each
# setting: call A's tree failed a launch in such a process)
export MICROGPT_TEST_DEVICE=gpu MICROGPT_GPU_EXAMPLES=2 PYTHONUNBUFFERED=1
T0=$(date +%s)
(MICROGPT_TEST_DEVICE= timeout 80 python3 bench/h200-2026-12-03-s19/decode/gen_check.py \
     > "$OUT/gen_check.log" 2>&1; echo "gen_check rc $? at $(( $(date +%s) - T0 )) s" >> "$OUT/gen_check.log") &
timeout 80 python3 -m pytest -q -n 3 -p no:cacheprovider tests/test_kernels_sampling.py \
    tests/test_generate.py tests/test_kernels_decode.py --durations=6 2>&1 \
    | grep -v "NumbaPerformanceWarning\|warn(errors" | tee "$OUT/test_gpu.log"
echo "pytest rc ${PIPESTATUS[0]} (124: timed out) at $(( $(date +%s) - T0 )) s" | tee -a "$OUT/test_gpu.log"
wait
grep -v "NumbaPerformanceWarning\|warn(errors" "$OUT/gen_check.log"
