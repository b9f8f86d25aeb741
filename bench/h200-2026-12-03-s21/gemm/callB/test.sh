#!/bin/bash
# gemm, call B: (1) the sweep's tiles and splits on andrea-12m's float32 products of N 384
# and the LM head's dW (and dX) against torch.mm in float32 (correctness on the GPU; fills
# the kernel cache that bench.sh's timings read); (2) the persistent kernel's new GELU
# forward epilogue: its GPU tests, the MLP up forward checked against torch, memcheck;
# (3) the step profile once (warms its kernels)
D=bench/h200-2026-12-03-s21/gemm
date -u > $OUT/test_date.txt
W384="QKV dX,MLP up dX,MLP down forward,LM head dX"
for v in default,pingpong,copier192 copier128,pp64x192,pp64x128 pp_d32,pp_s2,c192_s2; do
  PRODUCTS="$W384" VARIANTS=$v timeout 140 python3 $D/probe.py check andrea-12m > $OUT/check_w_${v%%,*}.log 2>&1 &
done
for v in default,copier,pingpong,copier192 copier_s5,copier_s6,copier_s8,pp_s6 c192_s4,c192_s6,pp_s8 c192_fold,c192_fold2 c192d32,c192d32_fold,c128_fold; do
  PRODUCTS="LM head dW,LM head dX" VARIANTS=$v timeout 140 python3 $D/probe.py check andrea-120m andrea-12m > $OUT/check_g_${v%%,*}.log 2>&1 &
done
REPS=2 timeout 140 python3 $D/probe.py gelu andrea-120m andrea-12m > $OUT/gelu_check.log 2>&1 &
MICROGPT_TEST_DEVICE=gpu MICROGPT_GPU_EXAMPLES=2 timeout 140 python3 -m pytest -q -x tests/test_kernels_gemm_bf16.py \
  -k "gelu_forward_matches or folds_a_long_k or warpgroups_walk or refuses_what or (test_step_products_persistent and MLP and up and forward)" > $OUT/pytest_gelu.log 2>&1 &
timeout 140 compute-sanitizer --tool memcheck --error-exitcode 1 python3 $D/sanitize.py > $OUT/memcheck.log 2>&1 &
timeout 140 python3 tools/profile_step.py --config andrea-120m --batch-size 16 --seq-len 1024 --precision bf16 > $OUT/profile_warm.log 2>&1 &
wait
grep -h "rel err\|FAILED" $OUT/check_*.log | sort > $OUT/check_all.txt
grep -v "rel err [0-9.]*e-0[6-9]\|rel err [0-9.]*e-[1-9][0-9]" $OUT/check_all.txt; wc -l < $OUT/check_all.txt
grep "rel err\|Error" $OUT/gelu_check.log; tail -3 $OUT/pytest_gelu.log; grep -v "Warning\|warn(" $OUT/memcheck.log | tail -8
tail -3 $OUT/profile_warm.log
