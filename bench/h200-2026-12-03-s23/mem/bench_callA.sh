#!/bin/bash
# mem, call A (60 s): global_norm_squared's and adamw_update's bandwidth at andrea-120m and
# GPT-2 XL's parameter counts against a 1 GiB device copy (session 22's table stopped before it)
date -u > $OUT/bench_date.txt
T0=$(date +%s)
timeout 56 python3 bench/h200-2026-12-03-s23/mem/bw.py --geometries andrea-120m gpt2-xl \
  --only global_norm adamw 2>&1 | grep -v "NumbaPerformanceWarning\|warn(errors\|^$" \
  | tee $OUT/bw.md
echo "=== $(( $(date +%s) - T0 )) s" | tee -a $OUT/bw.md
