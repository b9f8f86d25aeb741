#!/bin/bash
# call B (attn, <= 150 s, beside the other jobs' tests). Main has call A's work (the
# padded statistics: every T routed to the wgmma backward; the forward's donating
# producer warpgroup, not routed; hopper_operands.py split off). This branch adds the
# forward's walk in unsigned 32-bit counts (its stage index and phase, the diagonal's
# test: ~40 fewer SASS instructions in the loop) for every tile, the defaults included.
# 1) the forward's GPU property test (donating tiles now in its list), 2 seeds; 2) the
# donating tiles against float64 at ragged shapes (check_fwd); 3) the backward's property
# test, seeds 1 (call A: cut at its limit) and 4; 4) memcheck of the forward's defaults
# and a donating tile; 5) the ops' tests and the compile-ahead test (call A: cut at
# their limits, all passing so far); 6) the bench's kernels into the test cache.
S=bench/h200-2026-12-03-s21/attn
S22=bench/h200-2026-12-03-s22/attn
date -u | tee $OUT/date.txt
git log --oneline -1 > $OUT/commit.txt 2>/dev/null
export MICROGPT_TEST_DEVICE=gpu
PT="python3 -m pytest -q -rA -p no:warnings -p no:cacheprovider"
for seed in 1 2; do
  (MICROGPT_GPU_EXAMPLES=6 timeout 140 $PT tests/test_kernels_attention_hopper.py --hypothesis-seed=$seed --hypothesis-verbosity=verbose > $OUT/pytest_fwd_$seed.log 2>&1; echo "rc $?" >> $OUT/pytest_fwd_$seed.log) &
done
for seed in 1 4; do
  (MICROGPT_GPU_EXAMPLES=5 timeout 140 $PT tests/test_kernels_attention_hopper_backward.py -k test_hopper_attention_backward --hypothesis-seed=$seed --hypothesis-verbosity=verbose > $OUT/pytest_bwd_$seed.log 2>&1; echo "rc $?" >> $OUT/pytest_bwd_$seed.log) &
done
(timeout 100 python3 $S22/check_fwd.py 64 > $OUT/check_fwd_64.log 2>&1; echo "rc $?" >> $OUT/check_fwd_64.log
 CUDA_LAUNCH_BLOCKING=1 timeout 40 compute-sanitizer --tool memcheck --error-exitcode 99 python3 $S22/check_fwd.py quick 64 2>&1 \
   | grep -v "Warning\|warn(" | tail -12 > $OUT/memcheck_fwd.log; echo "memcheck rc ${PIPESTATUS[0]}" >> $OUT/memcheck_fwd.log) &
(timeout 140 python3 $S22/check_fwd.py 128 > $OUT/check_fwd_128.log 2>&1; echo "rc $?" >> $OUT/check_fwd_128.log) &
(MICROGPT_GPU_EXAMPLES=3 timeout 140 $PT tests/test_kernels_attention.py tests/test_compile_ahead.py > $OUT/pytest_ops.log 2>&1; echo "rc $?" >> $OUT/pytest_ops.log) &
(MICROGPT_GPU_EXAMPLES=3 timeout 140 $PT tests/test_kernels_flash_attention.py > $OUT/pytest_flash.log 2>&1; echo "rc $?" >> $OUT/pytest_flash.log) &
for p in 0 1; do
  timeout 120 python3 $S/time_attn.py --warm $p 2 --variants S --shapes 120m d128 12m > $OUT/warm_$p.log 2>&1 &
done
for w in 120m d128; do
  timeout 140 python3 $S22/time_fwd.py --warm --shapes $w > $OUT/warm_fwd_$w.log 2>&1 &
done
wait
grep -h "passed\|failed\|error\|rc \|ERROR SUMMARY\|FAIL" $OUT/pytest_*.log $OUT/*check*.log | grep -v "^E " | tail -40
echo "test.sh done at $SECONDS s"
