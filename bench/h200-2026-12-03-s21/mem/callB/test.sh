#!/bin/bash
# mem, call B: the LM head in chunks of rows (model.head_rows) and the arena (buffers whose
# lives do not overlap share memory) on the GPU: the chunked steps (eager, captured,
# replayed) and the bf16 step against the float64 reference, the chunk's GEMM shapes of
# andrea-120m and andrea-12m (step_products), generation (the decode step's head)
date -u > $OUT/test_date.txt
export MICROGPT_TEST_DEVICE=gpu MICROGPT_GPU_EXAMPLES=2
timeout 140 python3 -m pytest -q -p no:cacheprovider tests/test_cuda_model.py -k "chunks or bf16_step" > $OUT/test_chunks.log 2>&1 &
timeout 100 python3 -m pytest -q -p no:cacheprovider tests/test_kernels_gemm_bf16.py -k "step_products and LM" > $OUT/test_gemm.log 2>&1 &
timeout 100 python3 -m pytest -q -x -p no:cacheprovider tests/test_generate.py > $OUT/test_generate.log 2>&1 &
wait
tail -n 3 $OUT/test_*.log
