#!/bin/bash
# mem, call B: the step with the LayerNorm and GELU outputs recomputed in the backward
# (this tree) against main before it (main_tree: its microgpt/ and kernels/), one process
# each: device memory and tokens/s at andrea-120m, gpt2-medium, gpt2-xl (bf16, captured);
# then the memory-bound kernels' rates against the device's copy (bw.py)
T0=$(date +%s); left() { echo $(( ${LIMIT:-195} - $(date +%s) + T0 )); }
clean() { grep -v "NumbaPerformanceWarning\|warn(errors\|^$" ; }
date -u > $OUT/bench_date.txt
D=bench/h200-2026-12-03-s22/mem
timeout 75 python3 $D/ab.py --label mem --geometries gpt2-xl gpt2-medium andrea-120m 2>&1 | clean | tee $OUT/ab_mem.log
echo "=== $(( $(date +%s) - T0 )) s" | tee -a $OUT/ab_mem.log
PYTHONPATH=/tmp/site:$PWD/$D/main_tree timeout $(( $(left) - 35 )) python3 $D/ab.py --label main --geometries gpt2-medium andrea-120m gpt2-xl 2>&1 | clean | tee $OUT/ab_main.log
echo "=== $(( $(date +%s) - T0 )) s" | tee -a $OUT/ab_main.log
timeout $(( $(left) - 2 )) python3 $D/bw.py --geometries andrea-120m gpt2-xl 2>&1 | clean | tee $OUT/bw.md
echo "=== $(( $(date +%s) - T0 )) s" | tee -a $OUT/bw.md
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv >> $OUT/bw.md
