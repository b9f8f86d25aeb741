#!/bin/bash
# call C (attn, <= 130 s, beside the other helpers' tests). Branch s23-attn (jobs/commit.txt):
# main since call A (the forward's step end at the loop head, the masks by one bound)
# and the dq pass's step end at its loop head (new: the backward's kernels compile anew).
# 0) the sweep's candidates for D 64 below LONG_T (no ping-pong; persistent blocks, with and
# without) against float64 at ragged shapes (check_defaults tile=), memcheck of them;
# 1) the routed forward (default_tile) against float64 at ragged shapes each side of LONG_T
# and past it, both layouts, then the backward's defaults; 2) memcheck of the forward's
# D 64 short and long defaults and of D 128's, racecheck of the short one, memcheck of the
# backward's defaults; 3) the forward's and the backward's property tests; 4) the op's
# tests and the compile-ahead test; 5) the bench's kernels (ab.py, sweep.py with and
# without --backward) into the kernel cache for bench.sh.
S=bench/h200-2026-12-03-s23/attn
date -u | tee $OUT/date.txt
cp $S/jobs/commit.txt $OUT/ 2>/dev/null
export MICROGPT_TEST_DEVICE=gpu
PT="python3 -m pytest -q -rA -p no:warnings -p no:cacheprovider"
(timeout 100 python3 $S/check_defaults.py 64 > $OUT/check_defaults_64.log 2>&1; echo "rc $?" >> $OUT/check_defaults_64.log) &
(timeout 55 python3 $S/check_defaults.py 128 > $OUT/check_defaults_128.log 2>&1; echo "rc $?" >> $OUT/check_defaults_128.log
 timeout 65 python3 $S/check_defaults.py backward > $OUT/check_defaults_bwd.log 2>&1; echo "rc $?" >> $OUT/check_defaults_bwd.log) &
for t in 2,64,4,0,0,2,0,0 2,64,4,0,1,2,1,0 2,64,4,0,0,2,1,0; do
  (timeout 85 python3 $S/check_defaults.py 64 tile=$t > $OUT/check_tile_$t.log 2>&1; echo "rc $?" >> $OUT/check_tile_$t.log
   CUDA_LAUNCH_BLOCKING=1 timeout 35 compute-sanitizer --tool memcheck --error-exitcode 99 python3 $S/check_defaults.py quick 64 tile=$t 2>&1 \
     | grep -v "Warning\|warn(" | tail -8 > $OUT/memcheck_tile_$t.log; echo "memcheck rc ${PIPESTATUS[0]}" >> $OUT/memcheck_tile_$t.log) &
done
for c in "quick 64" "quick long 64" "quick 128" "backward quick 64" "backward quick 128"; do
  (CUDA_LAUNCH_BLOCKING=1 timeout 120 compute-sanitizer --tool memcheck --error-exitcode 99 python3 $S/check_defaults.py $c 2>&1 \
     | grep -v "Warning\|warn(" | tail -8 > $OUT/memcheck_${c// /_}.log; echo "memcheck rc ${PIPESTATUS[0]}" >> $OUT/memcheck_${c// /_}.log) &
done
(timeout 120 compute-sanitizer --tool racecheck --racecheck-report hazard --error-exitcode 99 python3 $S/check_defaults.py quick 64 2>&1 \
   | grep -v "Warning\|warn(" | tail -8 > $OUT/racecheck_fwd_64.log; echo "racecheck rc ${PIPESTATUS[0]}" >> $OUT/racecheck_fwd_64.log) &
for seed in 6 7; do
  (MICROGPT_GPU_EXAMPLES=4 timeout 122 $PT tests/test_kernels_attention_hopper.py --hypothesis-seed=$seed --hypothesis-verbosity=verbose > $OUT/pytest_fwd_$seed.log 2>&1; echo "rc $?" >> $OUT/pytest_fwd_$seed.log) &
done
(MICROGPT_GPU_EXAMPLES=1 timeout 122 $PT tests/test_kernels_attention_hopper_backward.py --hypothesis-seed=2 --hypothesis-verbosity=verbose > $OUT/pytest_bwd_2.log 2>&1; echo "rc $?" >> $OUT/pytest_bwd_2.log) &
(MICROGPT_GPU_EXAMPLES=2 timeout 122 $PT tests/test_kernels_attention.py tests/test_compile_ahead.py > $OUT/pytest_ops.log 2>&1; echo "rc $?" >> $OUT/pytest_ops.log) &
(timeout 122 python3 $S/ab.py --warm > $OUT/warm_ab.log 2>&1; echo "rc $?" >> $OUT/warm_ab.log) &
(timeout 122 python3 $S/sweep.py --warm > $OUT/warm_sweep.log 2>&1; echo "rc $?" >> $OUT/warm_sweep.log) &
(timeout 122 python3 $S/sweep.py --warm --backward > $OUT/warm_sweep_bwd.log 2>&1; echo "rc $?" >> $OUT/warm_sweep_bwd.log) &
wait
grep -h "passed\|failed\|rc \|ERROR SUMMARY\|RACECHECK SUMMARY\|FAIL\|check_defaults:" $OUT/*.log | grep -v "^E " | tail -40
echo "test.sh done at $SECONDS s"
