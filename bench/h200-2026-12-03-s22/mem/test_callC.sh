#!/bin/bash
# mem, call C (130 s): the bf16 step against float64 on the GPU, the recomputed activations
# (RECOMPUTE on: the chunked head's test takes it) and the default (kept: the bf16 step on
# rounded weights), one process each (call B's ran out of time in the float64 reference
# beside the other helpers' tests: 3 BLAS threads each now)
date -u > $OUT/test_date.txt
export MICROGPT_TEST_DEVICE=gpu MICROGPT_GPU_EXAMPLES=2 OPENBLAS_NUM_THREADS=3 OMP_NUM_THREADS=3
P="timeout -s INT 125 python3 -m pytest -q -p no:cacheprovider --durations=8"
$P tests/test_cuda_model.py -k "chunks and bf16 and case1" > $OUT/test_chunks12m.log 2>&1 &
$P tests/test_cuda_model.py -k "test_bf16_step_matches and overrides0" > $OUT/test_bf16step.log 2>&1 &
$P tests/test_cuda_model.py -k "chunks and bf16 and case2" > $OUT/test_chunks_gpt2.log 2>&1 &
wait
tail -n 12 $OUT/test_*.log
