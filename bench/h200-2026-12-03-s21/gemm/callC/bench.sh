#!/bin/bash
# gemm, call C (<= 40 s): every step product captured with the launcher's defaults as landed
# beside session 20's routing and cuBLAS in the same process; the MLP down dX with the
# persistent kernel's new GELU backward epilogue against the product + GELU kernel and the
# wgmma kernel's epilogue; andrea-12m's nine products of N 384 with ping-pong and the narrow
# copier if time is left
D=bench/h200-2026-12-03-s21/gemm
date -u > $OUT/bench_date.txt
VARIANTS=default,s20 REPS=5 timeout 27 python3 $D/probe.py time andrea-120m andrea-12m 2>&1 | grep -v "Warning\|warn(" | tee $OUT/time.log
left=$((38 - SECONDS)); [ $left -gt 4 ] && REPS=5 timeout $left python3 $D/probe.py gelu_backward andrea-120m andrea-12m 2>&1 | grep -v "Warning\|warn(" | tee $OUT/gelu_backward.log
N384="QKV dX,MLP up dX,MLP down forward,LM head dX,LM head dW,W_O forward,W_O dX,W_O dW,MLP down dW"
left=$((39 - SECONDS)); [ $left -gt 4 ] && PRODUCTS="$N384" VARIANTS=pingpong,copier192 REPS=5 timeout $left python3 $D/probe.py time andrea-12m 2>&1 | grep -v "Warning\|warn(" | tee $OUT/n384.log
