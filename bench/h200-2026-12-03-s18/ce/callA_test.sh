#!/bin/bash
# s18-ce call A: the staged cross-entropy (kernels/crossentropy.py) and AdamW in 16-byte
# groups (kernels/adamw.py) on the GPU, then compute-sanitizer on their small shapes;
# beside them the andrea-120m bf16 step's and micro.py's kernels compiled into the kernel
# cache (/tmp/mgcache/kernels) for bench.sh.
set -o pipefail
D=bench/h200-2026-12-03-s18/ce; C=bench/h200-2026-12-02/cached.py; J=$(dirname "$0")
export MICROGPT_GPU_EXAMPLES=3
T0=$(date +%s)
( timeout 150 python3 $C tools/profile_step.py --config andrea-120m --out $OUT/warm_prof.md \
    > $OUT/warm_prof.log 2>&1; echo "warm profile rc $?" >> $OUT/warm_prof.log ) &
( timeout 150 python3 $C $D/micro.py copy bf16 float32 adamw --adamw-main "$J/adamw_main.py" \
    > $OUT/warm_micro.log 2>&1; echo "warm micro rc $?" >> $OUT/warm_micro.log ) &
echo "=== GPU profile: the cross-entropy file, AdamW"
MICROGPT_TEST_DEVICE=gpu python3 -m pytest -q -x -n 2 -p no:cacheprovider \
    tests/test_kernels_crossentropy.py tests/test_kernels_optim.py \
    -k "crossentropy or adamw or default_blocks" --durations=8 2>&1 \
    | tee "$OUT/test_gpu.log"
rc=${PIPESTATUS[0]}
echo "GPU tests rc $rc"
echo "=== $(( $(date +%s) - T0 )) s; memcheck"
MICROGPT_TEST_DEVICE=gpu MICROGPT_TEST_SHAPES=small timeout 50 compute-sanitizer --tool memcheck \
    --error-exitcode 99 python3 -m pytest -q -x -p no:cacheprovider \
    tests/test_kernels_crossentropy.py tests/test_kernels_optim.py \
    -k "staged or forward_backward or groups_or" 2>&1 | tail -15 | tee "$OUT/memcheck.log"
echo "memcheck rc ${PIPESTATUS[0]}"
echo "=== $(( $(date +%s) - T0 )) s; racecheck"
MICROGPT_TEST_DEVICE=gpu MICROGPT_TEST_SHAPES=small timeout 35 compute-sanitizer --tool racecheck \
    --racecheck-report hazard --error-exitcode 99 python3 -m pytest -q -x -p no:cacheprovider \
    tests/test_kernels_crossentropy.py -k "staged" 2>&1 | tail -15 | tee "$OUT/racecheck.log"
echo "racecheck rc ${PIPESTATUS[0]}"
wait
echo "=== $(( $(date +%s) - T0 )) s; warm runs:"; tail -3 $OUT/warm_prof.log $OUT/warm_micro.log
exit $rc
