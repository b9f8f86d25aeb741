#!/bin/bash
# mem, call C (30 s): the bf16 step at andrea-120m with the LayerNorms' and GELU's outputs
# recomputed (RECOMPUTE on) and kept (the default), one process, the median of 10 replays
# (call B's ab.py had no row within its 60 s: compiles)
date -u > $OUT/bench_date.txt
T0=$(date +%s)
timeout 28 python3 bench/h200-2026-12-03-s22/mem/ab.py --label mem --geometries andrea-120m 2>&1 \
  | grep -v "NumbaPerformanceWarning\|warn(errors\|^$" | tee $OUT/ab.log
echo "=== $(( $(date +%s) - T0 )) s" | tee -a $OUT/ab.log
