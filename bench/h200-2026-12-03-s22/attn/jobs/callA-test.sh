#!/bin/bash
# call A (attn, <= 150 s, beside the other jobs' tests; no bench in call A). Branch s22-attn = s21-attn-statpad
# on main: the dk/dv pass's lse and delta boxes from the 16-byte boundary at or before the
# head's first value, 4 floats wider, in 128-byte shared slots; takes() no longer asks
# statistics_aligned, so every T routes to the wgmma backward. 1) its GPU property test,
# 3 processes x 5 drawn examples (seeds 1-3) + the explicit ones ((4, 4, 265, 64) among
# them); 2) memcheck of that example and of a ragged D 128, racecheck of the defaults at
# T 265 with two heads; 3) the routing and compile-ahead tests; 4) the ops' GPU tests
# (now routed at every T); 5) the forward's new tiles (a producer warpgroup donating its
# registers by setmaxnreg, launched by the driver's whole-program JIT) against float64 at
# ragged shapes, memcheck of one; 6) the bench's kernels compiled into the test cache.
S=bench/h200-2026-12-03-s21/attn
date -u | tee $OUT/date.txt
git log --oneline -1 > $OUT/commit.txt 2>/dev/null
export MICROGPT_TEST_DEVICE=gpu
PT="python3 -m pytest -q -rA -p no:warnings -p no:cacheprovider"
for seed in 1 2 3; do
  (MICROGPT_GPU_EXAMPLES=5 timeout 135 $PT tests/test_kernels_attention_hopper_backward.py -k test_hopper_attention_backward --hypothesis-seed=$seed --hypothesis-verbosity=verbose > $OUT/pytest_bwd_$seed.log 2>&1; echo "rc $?" >> $OUT/pytest_bwd_$seed.log) &
done
(for c in ex d128g1; do
   CUDA_LAUNCH_BLOCKING=1 timeout 45 compute-sanitizer --tool memcheck --error-exitcode 99 python3 $S/diag.py $c 2>&1 \
     | grep -v "Warning\|warn(" | tail -12 > $OUT/memcheck_$c.log; echo "memcheck rc ${PIPESTATUS[0]}" >> $OUT/memcheck_$c.log
 done
 timeout 45 compute-sanitizer --tool racecheck --racecheck-report hazard --error-exitcode 99 python3 $S/diag.py ragged2 2>&1 \
   | grep -v "Warning\|warn(" | tail -12 > $OUT/racecheck_ragged2.log; echo "racecheck rc ${PIPESTATUS[0]}" >> $OUT/racecheck_ragged2.log) &
(MICROGPT_GPU_EXAMPLES=2 timeout 60 $PT tests/test_kernels_attention_hopper_backward.py -k "not test_hopper_attention_backward or rejects or sends" > $OUT/pytest_route.log 2>&1; echo "rc $?" >> $OUT/pytest_route.log
 timeout 80 $PT tests/test_compile_ahead.py > $OUT/pytest_ahead.log 2>&1; echo "rc $?" >> $OUT/pytest_ahead.log) &
(MICROGPT_GPU_EXAMPLES=3 timeout 135 $PT tests/test_kernels_flash_attention.py tests/test_kernels_attention.py > $OUT/pytest_flash.log 2>&1; echo "rc $?" >> $OUT/pytest_flash.log) &
S22=bench/h200-2026-12-03-s22/attn
(timeout 95 python3 $S22/check_fwd.py 64 > $OUT/check_fwd_64.log 2>&1; echo "rc $?" >> $OUT/check_fwd_64.log
 CUDA_LAUNCH_BLOCKING=1 timeout 45 compute-sanitizer --tool memcheck --error-exitcode 99 python3 $S22/check_fwd.py quick 64 2>&1 \
   | grep -v "Warning\|warn(" | tail -12 > $OUT/memcheck_fwd.log; echo "memcheck rc ${PIPESTATUS[0]}" >> $OUT/memcheck_fwd.log) &
(timeout 140 python3 $S22/check_fwd.py 128 > $OUT/check_fwd_128.log 2>&1; echo "rc $?" >> $OUT/check_fwd_128.log) &
for p in 0 1; do
  timeout 120 python3 $S/time_attn.py --warm $p 2 --variants S --shapes 120m d128 12m > $OUT/warm_$p.log 2>&1 &
done
for w in 120m d128; do
  timeout 140 python3 $S22/time_fwd.py --warm --shapes $w > $OUT/warm_fwd_$w.log 2>&1 &
done
# ncu (instruction counts and SASS mix; timings under the other jobs' load mean nothing):
# the wgmma forward's default tile and a donating one at andrea-120m, one launch each
(for t in default 2,128,3,1,1,1,0,1; do
   timeout 65 ncu --clock-control none --kernel-name regex:hopper_attention_forward --launch-skip 2 \
     --launch-count 1 --set full --import-source no -f -o $OUT/fwd_120m_$t \
     python3 $S22/fwd_ncu.py 120m $([ $t = default ] || echo $t) > $OUT/ncu_run_$t.log 2>&1
   echo "ncu rc $?" >> $OUT/ncu_run_$t.log
   timeout 5 ncu --import $OUT/fwd_120m_$t.ncu-rep --page details --print-details all > $OUT/fwd_120m_${t}_details.txt 2>&1
   timeout 5 ncu --import $OUT/fwd_120m_$t.ncu-rep --page source --print-source sass --csv > $OUT/fwd_120m_${t}_sass.csv 2>&1
 done) &
wait
grep -h "passed\|failed\|error\|rc \|ERROR SUMMARY\|RACECHECK SUMMARY\|PASS\|FAIL" $OUT/pytest_*.log $OUT/*check*.log | grep -v "^E " | tail -40
echo "test.sh done at $SECONDS s"
