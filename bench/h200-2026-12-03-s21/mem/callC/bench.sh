#!/bin/bash
# mem, call C: the step with the head in chunks and the arena (main since c197f58) against
# main just before it (7145731's microgpt/ and kernels/: main_tree), in one call:
# tokens/s (median of 20 replays of the captured step) and the device memory it holds
date -u > $OUT/bench_date.txt
D=bench/h200-2026-12-03-s21/mem
( PYTHONPATH=/tmp/site:$PWD/$D/main_tree timeout 19 python3 $D/ab.py --label main --reps 20
  timeout 19 python3 $D/ab.py --label mem --reps 20 ) 2>&1 | grep -v "NumbaPerformanceWarning\|warn(errors" | tee $OUT/ab.log
