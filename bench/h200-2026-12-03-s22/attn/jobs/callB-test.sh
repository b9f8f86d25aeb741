#!/bin/bash
# call B (attn, <= 150 s, beside the other jobs' tests). Main has call A's work (the
# padded statistics: every T routed to the wgmma backward; the forward's donating
# producer warpgroup, not routed; hopper_operands.py split off). This branch adds, for
# every forward tile, the walk in unsigned 32-bit counts (~40 fewer SASS instructions in
# the loop) and a row's max and sum by trees, and the lazy max as a tile option. 1) the forward's bench tiles compiled
# (the sources changed: every key is new) and checked against mma.sync at (1, 2, 1024),
# seven processes, then the new tiles against float64 at ragged shapes (check_fwd) and
# memcheck of the D 64 ones; 2) the forward's GPU property test (donating and lazy tiles
# in its list), 2 seeds; 3) the backward's property test, seed 1 (call A: cut at its
# limit); 4) the op's tests and the compile-ahead test (call A: cut at their limits);
# 5) the backward's bench kernels into the test cache (call C).
S=bench/h200-2026-12-03-s21/attn
S22=bench/h200-2026-12-03-s22/attn
date -u | tee $OUT/date.txt
git log --oneline -1 > $OUT/commit.txt 2>/dev/null
export MICROGPT_TEST_DEVICE=gpu
PT="python3 -m pytest -q -rA -p no:warnings -p no:cacheprovider"
(timeout 85 python3 $S22/time_fwd.py --warm 0 4 --shapes 120m > $OUT/warm_fwd_120m_0.log 2>&1
 CUDA_LAUNCH_BLOCKING=1 timeout 55 compute-sanitizer --tool memcheck --error-exitcode 99 python3 $S22/check_fwd.py quick 64 2>&1 \
   | grep -v "Warning\|warn(" | tail -12 > $OUT/memcheck_fwd.log; echo "memcheck rc ${PIPESTATUS[0]}" >> $OUT/memcheck_fwd.log) &
for p in 1 2; do
  timeout 85 python3 $S22/time_fwd.py --warm $p 4 --shapes 120m > $OUT/warm_fwd_120m_$p.log 2>&1 &
done
(timeout 85 python3 $S22/time_fwd.py --warm 3 4 --shapes 120m > $OUT/warm_fwd_120m_3.log 2>&1
 timeout 55 python3 $S22/check_fwd.py 64 > $OUT/check_fwd_64.log 2>&1; echo "rc $?" >> $OUT/check_fwd_64.log) &
(timeout 85 python3 $S22/time_fwd.py --warm 0 3 --shapes d128 > $OUT/warm_fwd_d128_0.log 2>&1
 timeout 55 python3 $S22/check_fwd.py 128 > $OUT/check_fwd_128.log 2>&1; echo "rc $?" >> $OUT/check_fwd_128.log) &
for p in 1 2; do
  timeout 85 python3 $S22/time_fwd.py --warm $p 3 --shapes d128 > $OUT/warm_fwd_d128_$p.log 2>&1 &
done
for seed in 1 2; do
  (MICROGPT_GPU_EXAMPLES=6 timeout 140 $PT tests/test_kernels_attention_hopper.py --hypothesis-seed=$seed --hypothesis-verbosity=verbose > $OUT/pytest_fwd_$seed.log 2>&1; echo "rc $?" >> $OUT/pytest_fwd_$seed.log) &
done
(MICROGPT_GPU_EXAMPLES=5 timeout 140 $PT tests/test_kernels_attention_hopper_backward.py -k test_hopper_attention_backward --hypothesis-seed=1 --hypothesis-verbosity=verbose > $OUT/pytest_bwd_1.log 2>&1; echo "rc $?" >> $OUT/pytest_bwd_1.log) &
(MICROGPT_GPU_EXAMPLES=3 timeout 140 $PT tests/test_kernels_attention.py tests/test_compile_ahead.py > $OUT/pytest_ops.log 2>&1; echo "rc $?" >> $OUT/pytest_ops.log) &
for p in 0 1; do
  timeout 120 python3 $S/time_attn.py --warm $p 2 --variants S --shapes 120m d128 12m > $OUT/warm_$p.log 2>&1 &
done
wait
grep -h "passed\|failed\|error\|rc \|ERROR SUMMARY\|FAIL" $OUT/pytest_*.log $OUT/*check*.log | grep -v "^E " | tail -40
echo "test.sh done at $SECONDS s"
