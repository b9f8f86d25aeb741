#!/bin/bash
# gemm, call B (<= 80 s): the andrea-120m step profile with the routing
# (tools/profile_step.py); then, captured beside cuBLAS in the same process, the sweep of
# tiles and splits for andrea-12m's float32 products of N 384 and the LM head's dW (and
# dX); the MLP up forward with the persistent GELU epilogue against the product + GELU kernel
D=bench/h200-2026-12-03-s21/gemm
date -u > $OUT/bench_date.txt
timeout 28 python3 tools/profile_step.py --config andrea-120m --batch-size 16 --seq-len 1024 \
  --precision bf16 --out $OUT/profile_120m.md > $OUT/profile_120m.log 2>&1
head -12 $OUT/profile_120m.md 2>/dev/null || tail -5 $OUT/profile_120m.log
PRODUCTS="QKV dX,MLP up dX,MLP down forward,LM head dX" REPS=5 \
  VARIANTS=default,pingpong,copier192,copier128,pp64x192,pp64x128,pp_d32,pp_s2,c192_s2 \
  timeout 16 python3 $D/probe.py time andrea-12m 2>&1 | grep -v "Warning\|warn(" | tee $OUT/sweep_n384.log
PRODUCTS="LM head dW,LM head dX" REPS=5 \
  VARIANTS=default,copier,pingpong,copier192,copier_s5,copier_s6,copier_s8,c192_s4,c192_s6,pp_s6,pp_s8,c192_fold,c192_fold2,c192d32,c192d32_fold,c128_fold \
  timeout 22 python3 $D/probe.py time andrea-120m andrea-12m 2>&1 | grep -v "Warning\|warn(" | tee $OUT/sweep_lmhead.log
left=$((79 - SECONDS)); [ $left -gt 5 ] && REPS=5 timeout $left python3 $D/probe.py gelu andrea-120m andrea-12m 2>&1 | grep -v "Warning\|warn(" | tee $OUT/gelu_time.log
