#!/bin/bash
# mem, call B: the bf16 paths of the recomputed activations on the GPU (call A passed the
# fp32 step through them: the chunked head at andrea-12m, the captured steps; its bf16
# tests were still compiling at the limit): the bf16 step on rounded weights (andrea-12m,
# with GPT-2's biases too: the GELU forward pass after the fused sums), the chunked head
# in bf16, and the kernels' own tests (the LayerNorm backward's out, the GELU backward's
# act, the MLP GEMMs with act). Four processes, SIGINT at the limit; 4 BLAS threads each.
# A fifth compiles the bench's steps into the kernel cache (MICROGPT_CACHE_DIR) for
# bench.sh: ab.py, one replay a run (its memory figures here are not the bench's: the
# other helpers' tests share the device)
date -u > $OUT/test_date.txt
export MICROGPT_TEST_DEVICE=gpu MICROGPT_GPU_EXAMPLES=2 OPENBLAS_NUM_THREADS=4 OMP_NUM_THREADS=4
P="timeout -s INT 140 python3 -m pytest -q -p no:cacheprovider --durations=8"
$P tests/test_cuda_model.py -k "test_bf16_step_matches" > $OUT/test_bf16step.log 2>&1 &
$P tests/test_cuda_model.py -k "chunks and bf16" > $OUT/test_chunks.log 2>&1 &
$P tests/test_kernels_layernorm.py tests/test_kernels_elementwise.py -k "backward" > $OUT/test_kernels.log 2>&1 &
$P tests/test_kernels_gemm.py -k "gelu" > $OUT/test_gemm_gelu.log 2>&1 &
timeout -s INT 140 python3 bench/h200-2026-12-03-s22/mem/ab.py --label warm --reps 1 \
  --geometries gpt2-medium gpt2-xl:recomputed andrea-120m > $OUT/warm.log 2>&1 &
wait
grep "^{" $OUT/warm.log
tail -n 14 $OUT/test_*.log
