#!/bin/bash
# mem, call B (80 s): the bf16 step with the LayerNorms' and GELU's outputs recomputed in
# the backward (microgpt.model.RECOMPUTE on) against them kept (off), one process: device
# memory and tokens/s (median of 10 replays of the captured step) at gpt2-medium (both),
# gpt2-xl (recomputed: kept is session 18's 48.6 GiB), andrea-120m (both); a JSON line a run
# as it ends
date -u > $OUT/bench_date.txt
T0=$(date +%s)
D=bench/h200-2026-12-03-s22/mem
timeout 76 python3 $D/ab.py --label mem --geometries gpt2-medium gpt2-xl:recomputed andrea-120m 2>&1 \
  | grep -v "NumbaPerformanceWarning\|warn(errors\|^$" | tee $OUT/ab.log
echo "=== $(( $(date +%s) - T0 )) s" | tee -a $OUT/ab.log
