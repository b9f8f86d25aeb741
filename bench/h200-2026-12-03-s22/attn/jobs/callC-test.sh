#!/bin/bash
# call C (attn, <= 130 s, beside the other jobs' tests). Main (6ecd866) routes call B's
# winners: the wgmma forward's defaults by T (D 64 below 4096 the two-block ping-pong
# tile, from 4096 on three computing warpgroups with a donating producer warpgroup, D 128
# two with one), the walk in 32-bit counts and the trees for every tile. 1) the
# defaults against float64 at ragged shapes, T 4099 included (check_fwd default), then
# memcheck of the long-T D 64 default; 2) memcheck and racecheck of the D 64 short and
# D 128 defaults; 3) the forward's GPU property test (its example at LONG_T + 3), 2
# seeds; 4) the op's tests and the compile-ahead test; 5) the backward's property test,
# seed 1 (cut at its limit in calls A and B); 6) the bench's kernels (time_op --warm).
S22=bench/h200-2026-12-03-s22/attn
date -u | tee $OUT/date.txt
export MICROGPT_TEST_DEVICE=gpu
PT="python3 -m pytest -q -rA -p no:warnings -p no:cacheprovider"
(timeout 70 python3 $S22/check_fwd.py default > $OUT/check_fwd_default.log 2>&1; echo "rc $?" >> $OUT/check_fwd_default.log
 CUDA_LAUNCH_BLOCKING=1 timeout 50 compute-sanitizer --tool memcheck --error-exitcode 99 python3 $S22/check_fwd.py quick default long 64 2>&1 \
   | grep -v "Warning\|warn(" | tail -8 > $OUT/memcheck_long.log; echo "memcheck rc ${PIPESTATUS[0]}" >> $OUT/memcheck_long.log) &
(CUDA_LAUNCH_BLOCKING=1 timeout 60 compute-sanitizer --tool memcheck --error-exitcode 99 python3 $S22/check_fwd.py quick default 2>&1 \
   | grep -v "Warning\|warn(" | tail -8 > $OUT/memcheck_default.log; echo "memcheck rc ${PIPESTATUS[0]}" >> $OUT/memcheck_default.log
 timeout 60 compute-sanitizer --tool racecheck --racecheck-report hazard --error-exitcode 99 python3 $S22/check_fwd.py quick default 2>&1 \
   | grep -v "Warning\|warn(" | tail -8 > $OUT/racecheck_default.log; echo "racecheck rc ${PIPESTATUS[0]}" >> $OUT/racecheck_default.log) &
for seed in 3 4; do
  (MICROGPT_GPU_EXAMPLES=5 timeout 125 $PT tests/test_kernels_attention_hopper.py --hypothesis-seed=$seed --hypothesis-verbosity=verbose > $OUT/pytest_fwd_$seed.log 2>&1; echo "rc $?" >> $OUT/pytest_fwd_$seed.log) &
done
(MICROGPT_GPU_EXAMPLES=3 timeout 125 $PT tests/test_kernels_attention.py tests/test_compile_ahead.py > $OUT/pytest_ops.log 2>&1; echo "rc $?" >> $OUT/pytest_ops.log) &
(MICROGPT_GPU_EXAMPLES=3 timeout 125 $PT tests/test_kernels_attention_hopper_backward.py -k test_hopper_attention_backward --hypothesis-seed=1 --hypothesis-verbosity=verbose > $OUT/pytest_bwd_1.log 2>&1; echo "rc $?" >> $OUT/pytest_bwd_1.log) &
for w in "120m 12m" "4096 d128"; do
  timeout 110 python3 $S22/time_op.py --warm --shapes $w > $OUT/warm_op_${w// /_}.log 2>&1 &
done
wait
grep -h "passed\|failed\|rc \|ERROR SUMMARY\|RACECHECK SUMMARY\|FAIL\|check_fwd:" $OUT/pytest_*.log $OUT/*check*.log | grep -v "^E " | tail -30
echo "test.sh done at $SECONDS s"
