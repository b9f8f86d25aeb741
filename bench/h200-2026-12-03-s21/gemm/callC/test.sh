#!/bin/bash
# gemm, call C: the launcher's defaults as landed (the narrow copier for andrea-12m's N 384
# products, the GELU forward in the persistent epilogue) and session 20's routing beside
# (fills the cache bench.sh reads) on every step product against torch.mm in float32; the
# GEMM's GPU tests with the defaults and the new epilogues; the model's bf16 tests;
# memcheck on the GELU epilogue and the narrow copier
D=bench/h200-2026-12-03-s21/gemm
date -u > $OUT/test_date.txt
for c in andrea-120m andrea-12m; do
  VARIANTS=default,s20 timeout 140 python3 $D/probe.py check $c > $OUT/check_$c.log 2>&1 &
done
N384="QKV dX,MLP up dX,MLP down forward,LM head dX,LM head dW,W_O forward,W_O dX,W_O dW,MLP down dW"
PRODUCTS="$N384" VARIANTS=pingpong,copier192 timeout 140 python3 $D/probe.py check andrea-12m > $OUT/check_n384.log 2>&1 &
REPS=2 timeout 140 python3 $D/probe.py gelu andrea-120m andrea-12m > $OUT/gelu_check.log 2>&1 &
REPS=2 timeout 140 python3 $D/probe.py gelu_backward andrea-120m andrea-12m > $OUT/gelu_backward_check.log 2>&1 &
MICROGPT_TEST_DEVICE=gpu MICROGPT_GPU_EXAMPLES=2 timeout 140 python3 -m pytest -q -x tests/test_kernels_gemm_bf16.py \
  -k "test_step_products and not persistent and not LM" > $OUT/pytest_gemm.log 2>&1 &
MICROGPT_TEST_DEVICE=gpu MICROGPT_GPU_EXAMPLES=2 timeout 140 python3 -m pytest -q -x tests/test_kernels_gemm_bf16.py \
  -k "persistent_gelu_epilogues or folds_a_long_k or routes_to_the_persistent or asks_for_persistent" > $OUT/pytest_new.log 2>&1 &
MICROGPT_TEST_DEVICE=gpu timeout 140 python3 -m pytest -q -x tests/test_cuda_model.py \
  -k "bf16 or same_bits or deterministic" > $OUT/pytest_model.log 2>&1 &
timeout 140 compute-sanitizer --tool memcheck --error-exitcode 1 python3 $D/sanitize.py > $OUT/memcheck.log 2>&1 &
wait
grep -h "rel err\|FAILED" $OUT/check_*.log | sort > $OUT/check_all.txt
grep -v "rel err [0-9.]*e-0[6-9]\|rel err [0-9.]*e-[1-9][0-9]\|rel err 1\.6[0-9]e-03" $OUT/check_all.txt; wc -l < $OUT/check_all.txt
grep "rel err\|rel diff\|Error" $OUT/gelu_check.log $OUT/gelu_backward_check.log; tail -3 $OUT/pytest_gemm.log $OUT/pytest_new.log $OUT/pytest_model.log; grep -v "Warning\|warn(" $OUT/memcheck.log | tail -4
