#!/bin/bash
# mem, call A (135 s): the bf16 step against float64 on the GPU with the LayerNorms' and GELU's
# outputs recomputed (the chunked head's test sets RECOMPUTE), andrea-12m and the 2-layer
# GPT-2-shaped case, and the recomputed step against the kept one (test_recomputing_*),
# one process each; 3 BLAS threads each (the float64 reference)
date -u > $OUT/test_date.txt
export MICROGPT_TEST_DEVICE=gpu MICROGPT_GPU_EXAMPLES=2 OPENBLAS_NUM_THREADS=3 OMP_NUM_THREADS=3
P="timeout -s INT 132 python3 -m pytest -q -p no:cacheprovider --durations=8"
$P tests/test_cuda_model.py -k "chunks and bf16 and case1" > $OUT/test_chunks12m.log 2>&1 &
$P tests/test_cuda_model.py -k "chunks and bf16 and case2" > $OUT/test_chunks_gpt2.log 2>&1 &
$P tests/test_cuda_model.py -k "recomputing" > $OUT/test_recompute_ab.log 2>&1 &
wait
tail -n 12 $OUT/test_*.log
