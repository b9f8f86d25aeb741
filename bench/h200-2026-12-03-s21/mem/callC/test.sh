#!/bin/bash
# mem, call C: the chunked head's GPU tests first (they did not start in call B's 140 s:
# the bf16 step tests before them in the file took it; both of those passed), beside
# generation (its decode step's head) and andrea-120m's LM head chunk products; SIGINT at
# the limit, so that pytest still prints which passed
date -u > $OUT/test_date.txt
export MICROGPT_TEST_DEVICE=gpu MICROGPT_GPU_EXAMPLES=2
timeout -s INT 140 python3 -m pytest -q -p no:cacheprovider --durations=5 tests/test_cuda_model.py -k "chunks" > $OUT/test_chunks.log 2>&1 &
OPENBLAS_NUM_THREADS=4 OMP_NUM_THREADS=4 timeout -s INT 140 python3 -m pytest -q -p no:cacheprovider --durations=5 tests/test_generate.py > $OUT/test_generate.log 2>&1 &
OPENBLAS_NUM_THREADS=4 OMP_NUM_THREADS=4 timeout -s INT 140 python3 -m pytest -q -p no:cacheprovider --durations=5 "tests/test_kernels_gemm_bf16.py::test_step_products" -k "LM and 50304" > $OUT/test_gemm.log 2>&1 &
wait
tail -n 12 $OUT/test_*.log
