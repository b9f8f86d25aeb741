#!/bin/bash
# call A (attn, <= 140 s, beside the other helpers' tests; empty kernel caches). Branch
# s23-attn (jobs/commit.txt): the forward's step end at the loop's head, the dq pass's
# release after P, the masks by one bound a half. 1) the routed forward's tiles (default_tile(D, T)) against
# float64 at ragged shapes on each side of LONG_T and past it (T 6001), both layouts,
# memcheck of the D 64 short and long defaults and racecheck of the short one beside it;
# 2) D 128's defaults, then the backward's defaults at T 4100 (D 64) and 2053 (D 128);
# 3) the attention bench's kernels compiled into the kernel cache (attention_bench.py
# --warm) for bench.sh, and main's kernels beside this tree's (ab.py --warm, their results
# against mma.sync's at T 1027 / 4099); 4) the backward's property test, seed 1, 2 drawn examples (cut at
# its limit in every call of session 22); 5) the op's tests; 6) the forward's property
# test, seed 5; 7) ncu of the D 64 default forward at andrea-120m.
S=bench/h200-2026-12-03-s23/attn
date -u | tee $OUT/date.txt
cp $S/jobs/commit.txt $OUT/ 2>/dev/null
export MICROGPT_TEST_DEVICE=gpu
PT="python3 -m pytest -q -rA -p no:warnings -p no:cacheprovider"
(timeout 130 python3 $S/check_defaults.py 64 > $OUT/check_defaults_64.log 2>&1; echo "rc $?" >> $OUT/check_defaults_64.log) &
for c in "quick 64" "quick long 64"; do
  (CUDA_LAUNCH_BLOCKING=1 timeout 100 compute-sanitizer --tool memcheck --error-exitcode 99 python3 $S/check_defaults.py $c 2>&1 \
     | grep -v "Warning\|warn(" | tail -8 > $OUT/memcheck_fwd_${c// /_}.log; echo "memcheck rc ${PIPESTATUS[0]}" >> $OUT/memcheck_fwd_${c// /_}.log) &
done
(timeout 120 compute-sanitizer --tool racecheck --racecheck-report hazard --error-exitcode 99 python3 $S/check_defaults.py quick 64 2>&1 \
   | grep -v "Warning\|warn(" | tail -8 > $OUT/racecheck_fwd_64.log; echo "racecheck rc ${PIPESTATUS[0]}" >> $OUT/racecheck_fwd_64.log) &
(timeout 60 python3 $S/check_defaults.py 128 > $OUT/check_defaults_128.log 2>&1; echo "rc $?" >> $OUT/check_defaults_128.log
 timeout 75 python3 $S/check_defaults.py backward > $OUT/check_defaults_bwd.log 2>&1; echo "rc $?" >> $OUT/check_defaults_bwd.log) &
(timeout 135 python3 $S/attention_bench.py --warm > $OUT/warm_bench.log 2>&1; echo "rc $?" >> $OUT/warm_bench.log) &
(timeout 135 python3 $S/ab.py --warm > $OUT/warm_ab.log 2>&1; echo "rc $?" >> $OUT/warm_ab.log) &
(MICROGPT_GPU_EXAMPLES=2 timeout 135 $PT tests/test_kernels_attention_hopper_backward.py -k test_hopper_attention_backward --hypothesis-seed=1 --hypothesis-verbosity=verbose > $OUT/pytest_bwd_1.log 2>&1; echo "rc $?" >> $OUT/pytest_bwd_1.log) &
(MICROGPT_GPU_EXAMPLES=2 timeout 135 $PT tests/test_kernels_attention.py > $OUT/pytest_ops.log 2>&1; echo "rc $?" >> $OUT/pytest_ops.log) &
(MICROGPT_GPU_EXAMPLES=3 timeout 135 $PT tests/test_kernels_attention_hopper.py --hypothesis-seed=5 --hypothesis-verbosity=verbose > $OUT/pytest_fwd_5.log 2>&1; echo "rc $?" >> $OUT/pytest_fwd_5.log) &
# ncu of the D 64 default forward at andrea-120m (instruction counts and stall reasons; its
# durations under the other jobs' load are not timings)
S22=bench/h200-2026-12-03-s22/attn
(timeout 110 ncu --clock-control none --kernel-name regex:hopper_attention_forward --launch-skip 2 \
   --launch-count 1 --set full --import-source no -f -o $OUT/fwd_120m python3 $S22/fwd_ncu.py 120m > $OUT/ncu_run.log 2>&1
 echo "ncu rc $?" >> $OUT/ncu_run.log
 timeout 8 ncu --import $OUT/fwd_120m.ncu-rep --page details --print-details all > $OUT/fwd_120m_details.txt 2>&1
 timeout 8 ncu --import $OUT/fwd_120m.ncu-rep --page source --print-source sass --csv > $OUT/fwd_120m_sass.csv 2>&1
 python3 $S22/sass_mix.py $OUT/fwd_120m_sass.csv > $OUT/fwd_120m_mix.txt 2>&1) &
wait
grep -h "passed\|failed\|rc \|ERROR SUMMARY\|RACECHECK SUMMARY\|FAIL\|check_defaults:" $OUT/*.log | grep -v "^E " | tail -40
echo "test.sh done at $SECONDS s"
