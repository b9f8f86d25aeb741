#!/bin/bash
# s18-ce call B: the cross-entropy file on the GPU (the online pass without its compare per
# column in chunks with no new max) and the embedding's forward (in groups), the staged cross-entropy and AdamW in groups inside
# whole steps on the GPU
# (the captured andrea-120m float32 step against the float64 reference: V 50304 staged in
# float32, AdamW over 124M; the bf16 andrea-12m step), beside them tools/bench.py's fused
# section, micro.py and the step's profile compiled into the kernel cache for bench.sh.
set -o pipefail
D=bench/h200-2026-12-03-s18/ce; C=bench/h200-2026-12-02/cached.py; J=$(dirname "$0")
T0=$(date +%s)
( timeout 150 python3 $C tools/bench.py --only fused --reps 1 --out $OUT/warm_fused.md \
    > $OUT/warm_fused.log 2>&1; echo "warm fused rc $?" >> $OUT/warm_fused.log ) &
( timeout 150 python3 $C $D/micro.py bf16 adamw rest --adamw-main "$J/adamw_main.py" \
    > $OUT/warm_micro.log 2>&1; echo "warm micro rc $?" >> $OUT/warm_micro.log ) &
( timeout 150 python3 $C tools/profile_step.py --config andrea-120m --out $OUT/warm_prof.md \
    > $OUT/warm_prof.log 2>&1; echo "warm profile rc $?" >> $OUT/warm_prof.log ) &
( MICROGPT_TEST_DEVICE=gpu MICROGPT_GPU_EXAMPLES=3 timeout 120 python3 -m pytest -q -x -n 2 \
    -p no:cacheprovider --durations=5 tests/test_kernels_crossentropy.py \
    tests/test_kernels_embedding.py -k "crossentropy or encoder_forward or default_block" 2>&1 \
    | grep -v "NumbaPerformanceWarning\|warn(errors" > "$OUT/test_ce.log"
  echo "GPU cross-entropy and embedding tests rc ${PIPESTATUS[0]}" >> "$OUT/test_ce.log" ) &
echo "=== GPU: whole steps"
MICROGPT_TEST_DEVICE=gpu MICROGPT_GPU_EXAMPLES=3 timeout 155 python3 -m pytest -q -x -n 2 \
    -p no:cacheprovider --durations=5 \
    "tests/test_cuda_model.py::test_captured_steps_match_reference[andrea-120m-overrides1-2-256-1]" \
    "tests/test_cuda_model.py::test_bf16_step_matches_reference_on_rounded_weights[andrea-12m-overrides0-4-256]" \
    2>&1 | grep -v "NumbaPerformanceWarning\|warn(errors" | tee "$OUT/test_steps.log"
rc=${PIPESTATUS[0]}
echo "GPU step tests rc $rc"
wait
echo "=== $(( $(date +%s) - T0 )) s; warm runs:"
for f in warm_fused warm_micro warm_prof; do tail -n 3 $OUT/$f.log; done
tail -n 12 $OUT/test_ce.log
grep -q "tests rc 0" $OUT/test_ce.log || rc=1
exit $rc
