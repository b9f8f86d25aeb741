#!/bin/bash
# s20-decode call A: the skinny products at every MMA_UNROLL the bench times (GPU tests),
# generation and decoding at MMA_UNROLL 6, generations captured = eager in a process of
# their own at 6; beside them, the bench's kernel cache warmed for every variant
export MICROGPT_TEST_DEVICE=gpu MICROGPT_GPU_EXAMPLES=2 PYTHONUNBUFFERED=1
D=bench/h200-2026-12-03-s20/decode
F="NumbaPerformanceWarning\|warn(errors"
T0=$(date +%s)
(MICROGPT_TEST_DEVICE= timeout 140 python3 $D/unroll_sweep.py "$OUT/warm.md" --tokens 2 \
     > "$OUT/warm.log" 2>&1; echo "warm rc $? at $(( $(date +%s) - T0 )) s" >> "$OUT/warm.log") &
(MICROGPT_TEST_DEVICE= timeout 120 python3 -c "
import runpy, sys
from microgpt.kernels.gemm import skinny
skinny.MMA_UNROLL = 6
runpy.run_path('bench/h200-2026-12-03-s19/decode/gen_check.py', run_name='__main__')" \
     > "$OUT/gen_check6.log" 2>&1; echo "gen_check6 rc $? at $(( $(date +%s) - T0 )) s" >> "$OUT/gen_check6.log") &
timeout 60 python3 -m pytest -q -n 2 -p no:cacheprovider tests/test_kernels_skinny.py \
    --durations=4 2>&1 | grep -v "$F" | tee "$OUT/test_skinny.log"
echo "skinny pytest rc ${PIPESTATUS[0]} (124: timed out) at $(( $(date +%s) - T0 )) s" | tee -a "$OUT/test_skinny.log"
PYTHONPATH="$PYTHONPATH:$PWD/$D" MMA_UNROLL=6 timeout $(( 140 - $(date +%s) + T0 )) \
    python3 -m pytest -q -n 3 -p no:cacheprovider -p unroll_plugin tests/test_generate.py \
    tests/test_kernels_decode.py --durations=4 2>&1 | grep -v "$F" | tee "$OUT/test_gen6.log"
echo "gen6 pytest rc ${PIPESTATUS[0]} (124: timed out) at $(( $(date +%s) - T0 )) s" | tee -a "$OUT/test_gen6.log"
wait
cat "$OUT/gen_check6.log" "$OUT/warm.log" | grep -v "$F"
