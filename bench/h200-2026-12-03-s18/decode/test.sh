#!/bin/bash
# s18-decode call B. The tree is main's (session 14's sampler, the skinny products' run-time
# row count): generations at andrea-120m (background; they fill the kernel cache bench.sh
# reads), the sampler's, generate's and skinny's GPU tests. Beside them, in a copy of the
# tree, the sampler with top-k by byte histograms (radix_sampling.py, branch
# s18-decode-radix) and its tests, then racecheck of it. Every step under timeout.
set -o pipefail
HERE=$(dirname "$0")
export MICROGPT_TEST_DEVICE=gpu MICROGPT_GPU_EXAMPLES=2
T0=$(date +%s)
(timeout 150 python3 "$HERE/gen_check.py" > "$OUT/gen_check.log" 2>&1
 echo "gen_check rc $?" >> "$OUT/gen_check.log") &
RT=/tmp/radix_tree
rm -rf $RT && mkdir -p $RT && cp -r kernels microgpt tests tools pyproject.toml $RT/ 2>/dev/null
cp "$HERE/radix_sampling.py" $RT/kernels/sampling.py
cp "$HERE/radix_test_kernels_sampling.py" $RT/tests/test_kernels_sampling.py
(cd $RT && PYTHONPATH=/tmp/site:$RT timeout 110 python3 -m pytest -q -p no:cacheprovider \
     tests/test_kernels_sampling.py --durations=5 > "$OUT/radix_tests.log" 2>&1
 echo "radix tests rc $? at $(( $(date +%s) - T0 )) s" >> "$OUT/radix_tests.log"
 cd $RT && PYTHONPATH=/tmp/site:$RT MICROGPT_GPU_EXAMPLES=1 timeout $(( 160 - $(date +%s) + T0 )) \
     compute-sanitizer --tool racecheck --racecheck-report hazard --error-exitcode 99 \
     python3 -m pytest -q -x -p no:cacheprovider tests/test_kernels_sampling.py \
     -k "ties or last_byte or references_tokens" 2>&1 | tail -12 > "$OUT/radix_racecheck.log"
 echo "racecheck rc ${PIPESTATUS[0]} at $(( $(date +%s) - T0 )) s" >> "$OUT/radix_racecheck.log") &
echo "=== GPU tests: sampling, generate, skinny"
timeout 140 python3 -m pytest -q -n 2 -p no:cacheprovider tests/test_kernels_sampling.py \
    tests/test_generate.py tests/test_kernels_skinny.py --durations=15 2>&1 \
    | grep -v "NumbaPerformanceWarning\|warn(errors" | tee "$OUT/test_gpu.log"
echo "pytest rc ${PIPESTATUS[0]} (124: timed out) at $(( $(date +%s) - T0 )) s"
wait
echo "=== generations:"; grep -v "NumbaPerformanceWarning\|warn(errors" "$OUT/gen_check.log"
echo "=== radix tests:"; tail -15 "$OUT/radix_tests.log"; cat "$OUT/radix_racecheck.log"
echo "=== $(( $(date +%s) - T0 )) s; done"
