#!/bin/bash
# mem, call B (80 s): the bf16 step with the LayerNorms' and GELU's outputs recomputed in
# the backward (microgpt.model.RECOMPUTE on) against them kept (off), one process: device
# memory and tokens/s (median of 10 replays of the captured step) at gpt2-medium (both),
# gpt2-xl (recomputed: kept is session 18's 48.6 GiB), andrea-120m (both); a JSON line a run
# as it ends. Then, in what is left, the memory-bound kernels' rates against the device's
# copy at andrea-120m (bw.py)
date -u > $OUT/bench_date.txt
T0=$(date +%s); left() { local l=$(( 77 - $(date +%s) + T0 )); echo $(( l > 1 ? l : 1 )); }
clean() { grep -v "NumbaPerformanceWarning\|warn(errors\|^$" ; }
D=bench/h200-2026-12-03-s22/mem
timeout 60 python3 $D/ab.py --label mem --geometries gpt2-medium gpt2-xl:recomputed andrea-120m 2>&1 \
  | clean | tee $OUT/ab.log
echo "=== $(( $(date +%s) - T0 )) s" | tee -a $OUT/ab.log
timeout $(left) python3 $D/bw.py --geometries andrea-120m 2>&1 | clean | tee $OUT/bw.md
echo "=== $(( $(date +%s) - T0 )) s" | tee -a $OUT/bw.md
