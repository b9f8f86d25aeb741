#!/bin/bash
# call C (attn, <= 150 s, beside the other jobs' tests): branch s20-attn with the op's backward
# routed to the wgmma passes. Call B's pytest died of CUDA_ERROR_ILLEGAL_INSTRUCTION with its
# summary cut: now one process per test group, full logs, launches blocking (the failing
# kernel named); memcheck and racecheck of the defaults and of a producer warp's dq pass;
# a bf16 step at T 1024 (test_compile_ahead) through the routed backward
set -x
S=bench/h200-2026-12-03-s20/attn
date -u | tee $OUT/date.txt
for p in 0 1 2; do
  timeout 110 python3 $S/time_attn.py --warm $p 3 --variants C --shapes 120m d128 12m 4096 > $OUT/warm_$p.log 2>&1 &
done
(timeout 120 compute-sanitizer --tool memcheck --error-exitcode 99 python3 $S/sanitize.py 64 128 \
  2>&1 | grep -v "Warning\|warn(" > $OUT/memcheck.log; echo "memcheck rc ${PIPESTATUS[0]}" >> $OUT/memcheck.log) &
(timeout 140 compute-sanitizer --tool racecheck --racecheck-report hazard --error-exitcode 99 \
  python3 $S/sanitize.py 64 128 2>&1 | grep -v "Warning\|warn(" > $OUT/racecheck.log; echo "racecheck rc ${PIPESTATUS[0]}" >> $OUT/racecheck.log) &
export MICROGPT_TEST_DEVICE=gpu MICROGPT_GPU_EXAMPLES=2 CUDA_LAUNCH_BLOCKING=1
PT="python3 -m pytest -v -rA -p no:warnings -p no:cacheprovider"
(timeout 140 $PT tests/test_kernels_attention_hopper_backward.py -k test_hopper_attention_backward > $OUT/pytest_bwd.log 2>&1; echo "rc $?" >> $OUT/pytest_bwd.log) &
(timeout 140 $PT tests/test_kernels_attention_hopper_backward.py -k "not test_hopper_attention_backward" > $OUT/pytest_bwd_other.log 2>&1; echo "rc $?" >> $OUT/pytest_bwd_other.log) &
(timeout 140 $PT tests/test_kernels_attention_hopper.py > $OUT/pytest_fwd.log 2>&1; echo "rc $?" >> $OUT/pytest_fwd.log) &
(timeout 140 $PT tests/test_kernels_mma.py > $OUT/pytest_mma.log 2>&1; echo "rc $?" >> $OUT/pytest_mma.log) &
(timeout 140 $PT tests/test_compile_ahead.py > $OUT/pytest_ahead.log 2>&1; echo "rc $?" >> $OUT/pytest_ahead.log) &
wait
grep -h "passed\|failed\|error\|rc " $OUT/pytest_*.log | tail -20
echo "test.sh done at $SECONDS s"
