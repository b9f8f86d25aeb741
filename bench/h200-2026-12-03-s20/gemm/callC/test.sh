#!/bin/bash
# gemm, call C: the routed defaults (copier / ping-pong tiles) on every step product against
# torch.mm in float32 (and the wgmma tiles beside: fills the kernel cache bench.sh reads);
# the GEMM's GPU tests with the launcher's defaults; the model's bf16 and same-bits tests;
# compute-sanitizer's memcheck on the copier and ping-pong tiles
D=bench/h200-2026-12-03-s20/gemm
date -u > $OUT/test_date.txt
timeout 40 python3 $D/jit_probe.py > $OUT/jit_probe.log 2>&1 &
for v in default wgmma; do
  VARIANTS=$v timeout 120 python3 $D/probe.py check andrea-120m andrea-12m > $OUT/check_$v.log 2>&1 &
done
MICROGPT_TEST_DEVICE=gpu MICROGPT_GPU_EXAMPLES=2 timeout 140 python3 -m pytest -q -x \
  tests/test_kernels_gemm_bf16.py -k "(test_step_products and not persistent and not LM) or matches_reference or warpgroups_walk" \
  > $OUT/pytest_gemm.log 2>&1 &
MICROGPT_TEST_DEVICE=gpu timeout 140 python3 -m pytest -q -x tests/test_cuda_model.py \
  -k "bf16 or same_bits or deterministic" > $OUT/pytest_model.log 2>&1 &
timeout 140 compute-sanitizer --tool memcheck --error-exitcode 1 python3 $D/sanitize.py > $OUT/memcheck.log 2>&1 &
wait
grep -hv "Warning\|warn(" $OUT/check_*.log | grep -v "rel err [0-9.e-]*  (" ; grep -h "rel err" $OUT/check_*.log | wc -l
tail -3 $OUT/pytest_gemm.log $OUT/pytest_model.log; grep -v "Warning\|warn(" $OUT/memcheck.log | tail -12
