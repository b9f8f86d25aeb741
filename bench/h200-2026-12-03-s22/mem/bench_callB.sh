#!/bin/bash
# mem, call B: the bf16 step with the LayerNorms' and GELU's outputs recomputed in the
# backward (microgpt.model.RECOMPUTE on) against them kept (off), one process on one model
# a geometry: device memory and tokens/s (median of 10 replays of the captured step) at
# andrea-120m, gpt2-medium, gpt2-xl; then the memory-bound kernels' rates against the
# device's copy (bw.py, captured launches)
T0=$(date +%s); left() { local l=$(( 195 - $(date +%s) + T0 )); echo $(( l > 1 ? l : 1 )); }
clean() { grep -v "NumbaPerformanceWarning\|warn(errors\|^$" ; }
date -u > $OUT/bench_date.txt
D=bench/h200-2026-12-03-s22/mem
timeout $(( $(left) - 30 )) python3 $D/ab.py --label mem --geometries andrea-120m gpt2-medium gpt2-xl 2>&1 | clean | tee $OUT/ab.log
echo "=== $(( $(date +%s) - T0 )) s" | tee -a $OUT/ab.log
timeout $(( $(left) - 2 )) python3 $D/bw.py --geometries andrea-120m gpt2-xl 2>&1 | clean | tee $OUT/bw.md
echo "=== $(( $(date +%s) - T0 )) s" | tee -a $OUT/bw.md
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv >> $OUT/bw.md
