#!/bin/bash
# call A (attn, <= 140 s beside the other helpers' tests). Branch s24-attn = main at the
# session's start: session 23's SASS cuts since its call A (the forward copier's stage and
# phase from unsigned counts, 09c44dc) have not run on a GPU. Each check a background
# subshell with its own timeout, all within 130 s:
# 1) the routed forward (default_tile) against float64 at ragged shapes each side of
#    LONG_T and past it, both layouts; D 128's; then the backward's defaults;
# 2) memcheck of the forward's D 64 short, long and D 128 defaults and of the backward's;
#    racecheck of the forward's D 64 short default and of the backward's D 64 default;
# 3) the forward's and the backward's property tests (few examples: the backward's was cut
#    at its limit with 2 in sessions 22 and 23); the op's tests;
# 4) the kernels of bench.sh (ab.py, attention_bench.py) into the kernel cache;
# 5) ncu of the backward's dk/dv and dq passes at andrea-120m (instruction mix, stalls:
#    their durations under the other jobs' load are not timings).
S=bench/h200-2026-12-04-s24/attn
date -u | tee $OUT/date.txt
cp $S/jobs/commit.txt $OUT/ 2>/dev/null
# the tree it ran, to match with the branch's commits (no git history here)
sha1sum kernels/attention/*.py tests/test_kernels_attention*.py $S/*.py > $OUT/tree.sha1
export MICROGPT_TEST_DEVICE=gpu
PT="python3 -m pytest -q -rA -p no:warnings -p no:cacheprovider"
CD="python3 $S/check_defaults.py"
(timeout 125 $CD 64 > $OUT/check_defaults_64.log 2>&1; echo "rc $?" >> $OUT/check_defaults_64.log) &
(timeout 55 $CD 128 > $OUT/check_defaults_128.log 2>&1; echo "rc $?" >> $OUT/check_defaults_128.log
 timeout 70 $CD backward > $OUT/check_defaults_bwd.log 2>&1; echo "rc $?" >> $OUT/check_defaults_bwd.log) &
for c in "quick 64 128" "quick long 64" "backward quick 64 128"; do
  (CUDA_LAUNCH_BLOCKING=1 timeout 125 compute-sanitizer --tool memcheck --error-exitcode 99 $CD $c 2>&1 \
     | grep -v "Warning\|warn(" | tail -8 > $OUT/memcheck_${c// /_}.log; echo "memcheck rc ${PIPESTATUS[0]}" >> $OUT/memcheck_${c// /_}.log) &
done
for c in "quick 64" "backward quick 64"; do
  (timeout 125 compute-sanitizer --tool racecheck --racecheck-report hazard --error-exitcode 99 $CD $c 2>&1 \
     | grep -v "Warning\|warn(" | tail -8 > $OUT/racecheck_${c// /_}.log; echo "racecheck rc ${PIPESTATUS[0]}" >> $OUT/racecheck_${c// /_}.log) &
done
(MICROGPT_GPU_EXAMPLES=3 timeout 125 $PT tests/test_kernels_attention_hopper.py --hypothesis-seed=8 --hypothesis-verbosity=verbose > $OUT/pytest_fwd_8.log 2>&1; echo "rc $?" >> $OUT/pytest_fwd_8.log) &
(MICROGPT_GPU_EXAMPLES=1 timeout 125 $PT tests/test_kernels_attention_hopper_backward.py --hypothesis-seed=3 --hypothesis-verbosity=verbose > $OUT/pytest_bwd_3.log 2>&1; echo "rc $?" >> $OUT/pytest_bwd_3.log) &
(MICROGPT_GPU_EXAMPLES=2 timeout 125 $PT tests/test_kernels_attention.py > $OUT/pytest_ops.log 2>&1; echo "rc $?" >> $OUT/pytest_ops.log) &
(timeout 128 python3 $S/ab.py --warm > $OUT/warm_ab.log 2>&1; echo "rc $?" >> $OUT/warm_ab.log) &
(timeout 128 python3 $S/attention_bench.py --warm > $OUT/warm_bench.log 2>&1; echo "rc $?" >> $OUT/warm_bench.log) &
for p in dkdv dq; do
  (timeout 110 ncu --clock-control none --kernel-name regex:backward_$p --launch-skip 2 --launch-count 1 \
     --set full --import-source no -f -o $OUT/bwd_${p}_120m python3 $S/attn_ncu.py 120m backward > $OUT/ncu_$p.log 2>&1
   echo "ncu rc $?" >> $OUT/ncu_$p.log
   timeout 8 ncu --import $OUT/bwd_${p}_120m.ncu-rep --page details --print-details all > $OUT/bwd_${p}_120m_details.txt 2>&1
   timeout 8 ncu --import $OUT/bwd_${p}_120m.ncu-rep --page source --print-source sass --csv > $OUT/bwd_${p}_120m_sass.csv 2>&1
   python3 $S/sass_mix.py $OUT/bwd_${p}_120m_sass.csv > $OUT/bwd_${p}_120m_mix.txt 2>&1
   rm -f $OUT/bwd_${p}_120m.ncu-rep; gzip -f $OUT/bwd_${p}_120m_sass.csv) &
done
wait
grep -H "passed\|failed\|rc \|ERROR SUMMARY\|RACECHECK SUMMARY\|FAIL\|check_defaults:" $OUT/*.log | grep -v ":E " | tail -50
echo "test.sh done at $SECONDS s"
