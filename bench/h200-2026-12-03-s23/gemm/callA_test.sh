#!/bin/bash
# session 23, call A (helper gemm, beside the other helpers' tests; limit 140 s): the GEMM's GPU
# tests on today's routing: every step product of both configs with the launcher's default
# tile and split (split_slabs' narrow copier included), the persistent kernel (no fold since
# 0f3b07b: a split longer than a chain refused), the launcher's split of a written float32
# out, the GELU products (the GELU backward now the wgmma kernel's); memcheck of the copier,
# ping-pong and narrow copier (bench/h200-2026-12-03-s22/gemm/sanitize.py); the programmatic
# launch (new, off by default in this tree): cuda.core's LaunchConfig taking it, and a chain
# of products each waiting for the one before.
# 2 examples each (an empty kernel cache: compiling takes most of the time), verbose.
D=bench/h200-2026-12-03-s23/gemm
export MICROGPT_TEST_DEVICE=gpu MICROGPT_GPU_EXAMPLES=2
echo "tree at $(cat $D/commit.txt 2>/dev/null)" > $OUT/test.log
clean() { grep -v "Warning\|warn(" ; }
python3 -c "import cuda.core, numba_cuda; from cuda.core import LaunchConfig as L; print('cuda.core', cuda.core.__version__, 'numba-cuda', numba_cuda.__version__, 'programmatic', 'programmatic_stream_serialization' in dir(L))" 2>&1 | tee -a $OUT/test.log
timeout -k 3 130 python3 -m pytest -v -p no:cacheprovider tests/test_kernels_gemm_bf16.py \
  -k "(test_step_products and not persistent) or persistent_kernel_matches or refuses_what or written_float32_out_sums or default_tile_and_split or routes_to_the_persistent" \
  2>&1 | clean > $OUT/test_bf16.log &
timeout -k 3 130 python3 -m pytest -v -p no:cacheprovider tests/test_kernels_gemm_bf16.py \
  -k "chain" 2>&1 | clean > $OUT/test_chain.log &
timeout -k 3 130 python3 -m pytest -v -p no:cacheprovider tests/test_kernels_gemm.py \
  -k "fused_gelu_products or model_products" 2>&1 | clean > $OUT/test_gelu.log &
timeout -k 3 130 compute-sanitizer --tool memcheck --error-exitcode 1 \
  python3 bench/h200-2026-12-03-s22/gemm/sanitize.py 2>&1 | clean > $OUT/memcheck.log &
wait
for f in $OUT/test_chain.log $OUT/test_bf16.log $OUT/test_gelu.log $OUT/memcheck.log; do
  echo "== $f"; grep -E "PASSED|FAILED|ERROR|passed|failed|error" $f | tail -n 30
done 2>&1 | tee -a $OUT/test.log
