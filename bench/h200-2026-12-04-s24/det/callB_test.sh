#!/bin/bash
# session 24, call B (helper det, beside the other helpers' tests; limit 140 s), on the
# embedding's host sort (4e25f3f) and add_parts in 16-byte groups (e571f41): the
# embedding's GPU tests; add_parts' and the persistent kernel's ordered property tests
# (turns and by parts); the model's two deterministic runs bit for bit (GPU profile: both
# precisions at andrea-12m) and its accum-2 Step on a deterministic backend against the
# reference; two trainer runs of a seed with --deterministic at andrea-12m; the host
# sort's time. Each in the background under its own limit.
S=bench/h200-2026-12-04-s24/det
echo "tree at $(cat $S/commit.txt)" | tee $OUT/test.log
export MICROGPT_TEST_DEVICE=gpu MICROGPT_GPU_EXAMPLES=2
t() {   # name limit pytest-args...
  local name=$1 limit=$2; shift 2
  echo "pytest $*" > $OUT/$name.log
  timeout -k 3 $limit python3 -m pytest -v -p no:cacheprovider "$@" 2>&1 \
    | grep -v "Warning\|warn(" >> $OUT/$name.log
  echo "$name rc ${PIPESTATUS[0]}" >> $OUT/$name.log
}
t test_embedding 120 tests/test_kernels_embedding.py &
t test_ordered 130 tests/test_kernels_gemm_bf16.py -k "add_parts or persistent_ordered_split_k" &
t test_model_bits 130 tests/test_cuda_model.py -k same_bits &
t test_model_step 130 tests/test_cuda_model.py -k "captured_steps and True" &
(bash bench/h200-2026-12-03-s21/det/same_bits_runs.sh andrea-12m 64 200 62) &
(echo "python3 $S/host_sort.py \$DATA/train.bin 4096 64 256; ... 16 1024"
 timeout 60 python3 $S/host_sort.py $DATA/train.bin 4096 64 256
 timeout 60 python3 $S/host_sort.py $DATA/train.bin 4096 16 1024) > $OUT/host_sort.log 2>&1 &
wait
cat $OUT/samebits.txt >> $OUT/test.log
for f in test_embedding test_ordered test_model_bits test_model_step; do grep -E "passed|failed|error| rc " \
  $OUT/$f.log | tail -3 >> $OUT/test.log; done
