#!/bin/bash
# s20-decode call B: the skinny products (the LayerNorm made inside them at MMA_UNROLL 1, 2,
# 3, 6), the GEMM router's layernorm_matmul, generation (each test with the LayerNorms fused
# and not), decoding and sampling (the kernels' first pass one device function) at the
# default MMA_UNROLL 2; generations captured = eager in a
# process of their own at 3, fused; beside them, the bench's kernel cache warmed for every
# variant
export MICROGPT_TEST_DEVICE=gpu MICROGPT_GPU_EXAMPLES=2 PYTHONUNBUFFERED=1
D=bench/h200-2026-12-03-s20/decode
F="NumbaPerformanceWarning\|warn(errors\|PytestBenchmarkWarning\|warner("
T0=$(date +%s)
(MICROGPT_TEST_DEVICE= timeout 140 python3 $D/variant_sweep.py "$OUT/warm.md" --tokens 2 \
     > "$OUT/warm.log" 2>&1; echo "warm rc $? at $(( $(date +%s) - T0 )) s" >> "$OUT/warm.log") &
(MICROGPT_TEST_DEVICE= timeout 130 python3 -c "
import runpy
from microgpt import generate
from microgpt.kernels.gemm import skinny
skinny.MMA_UNROLL, generate.FUSE_NORMS = 3, True
runpy.run_path('bench/h200-2026-12-03-s19/decode/gen_check.py', run_name='__main__')" \
     > "$OUT/gen_check3f.log" 2>&1; echo "gen_check3f rc $? at $(( $(date +%s) - T0 )) s" >> "$OUT/gen_check3f.log") &
timeout 125 python3 -m pytest -q -n 4 -p no:cacheprovider tests/test_kernels_skinny.py \
    tests/test_generate.py tests/test_kernels_decode.py tests/test_kernels_sampling.py \
    tests/test_kernels_gemm.py -k "skinny or generate or decode or sampling or layernorm_matmul" --durations=5 2>&1 | grep -v "$F" \
    | tee "$OUT/test_main.log"
echo "pytest rc ${PIPESTATUS[0]} (124: timed out) at $(( $(date +%s) - T0 )) s" | tee -a "$OUT/test_main.log"
wait
cat "$OUT/gen_check3f.log" "$OUT/warm.log" | grep -v "$F"
