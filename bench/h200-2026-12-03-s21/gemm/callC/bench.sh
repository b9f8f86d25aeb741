#!/bin/bash
# gemm, call C (<= 40 s): every step product captured with the launcher's defaults as landed
# beside session 20's routing and cuBLAS in the same process
D=bench/h200-2026-12-03-s21/gemm
date -u > $OUT/bench_date.txt
VARIANTS=default,s20 REPS=5 timeout 37 python3 $D/probe.py time andrea-120m andrea-12m 2>&1 | grep -v "Warning\|warn(" | tee $OUT/time.log
