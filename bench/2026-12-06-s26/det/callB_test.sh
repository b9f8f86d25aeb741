#!/bin/bash
# session 26, call B (helper det, beside the other helpers' tests; limit ~150 s): the
# embedding's GPU tests (its new backward: threads of 4 columns loading their rows
# together) and under compute-sanitizer memcheck at the simulator's shapes; the model's
# deterministic runs bit for bit (a third with add_parts on the stream, not beside it)
# (each precision in a process of its own: a cold compile) and its captured steps on a
# deterministic backend against the reference (the ordered GEMM's own tests passed on this
# add_parts in session 24's call B); embed_ab.py at
# both configs (same bits twice and 1e-5 of float64 at real shapes; compiles the bench's
# kernels); two trainer runs of a seed with --deterministic at andrea-12m; det_ab.py's
# andrea-120m steps by parts once (compiles them for the bench). Each part in the
# background under its own limit.
S=bench/2026-12-06-s26/det
echo "tree at $(cat commit.txt)"     # (stdout: the call's test.log)
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
clean() { grep --line-buffered -v "Warning\|warn(" ; }
export MICROGPT_TEST_DEVICE=gpu MICROGPT_GPU_EXAMPLES=2
# one kernel cache for the tests, the benches and the trainer (default_cache_dir's), so
# that what one process compiled the others find (the carried caches may be empty)
export MICROGPT_TEST_KERNEL_CACHE=${MICROGPT_CACHE_DIR:-/tmp/mgcache}/kernels
t() {   # name limit pytest-args...
  local name=$1 limit=$2; shift 2
  echo "pytest $*" > $OUT/$name.log
  timeout -k 3 $limit python3 -m pytest -v -p no:cacheprovider "$@" 2>&1 | clean >> $OUT/$name.log
  echo "$name rc ${PIPESTATUS[0]}" >> $OUT/$name.log
}
t test_model_bits_bf16 160 tests/test_cuda_model.py -k "same_bits and bf16" &
t test_model_bits_fp32 150 tests/test_cuda_model.py -k "same_bits and fp32" &
t test_model_step 160 tests/test_cuda_model.py -k "captured_steps and True" &
t test_embedding 110 tests/test_kernels_embedding.py &
( export MICROGPT_TEST_SHAPES=small MICROGPT_GPU_EXAMPLES=4
  echo "compute-sanitizer --tool memcheck pytest tests/test_kernels_embedding.py (small)" > $OUT/memcheck.log
  timeout -k 3 120 compute-sanitizer --tool memcheck --error-exitcode 99 python3 -m pytest -q \
    -p no:cacheprovider tests/test_kernels_embedding.py 2>&1 | clean >> $OUT/memcheck.log
  echo "memcheck rc ${PIPESTATUS[0]}" >> $OUT/memcheck.log ) &
( for c in "andrea-12m 64 256" "andrea-120m 16 1024"; do
    echo "python3 $S/embed_ab.py $c 4096 \$DATA/train.bin"
    timeout -k 3 60 python3 $S/embed_ab.py $c 4096 $DATA/train.bin 2>&1 | clean
    echo "rc ${PIPESTATUS[0]}"
  done > $OUT/warm_embed_ab.log ) &
(bash bench/h200-2026-12-03-s21/det/same_bits_runs.sh andrea-12m 64 200 75) &
( V="default,deterministic,deterministic, every ordered product by parts"
  echo "VARIANTS=$V python3 $S/det_ab.py andrea-120m 16 1024 1 1 4096 \$DATA/train.bin"
  VARIANTS=$V timeout -k 3 140 python3 $S/det_ab.py andrea-120m 16 1024 1 1 4096 $DATA/train.bin 2>&1 | clean
  echo "rc ${PIPESTATUS[0]}" ) > $OUT/warm_det_ab.log 2>&1 &
wait
cat $OUT/samebits.txt
for f in test_model_bits_bf16 test_model_bits_fp32 test_model_step test_embedding memcheck; do
  echo "== $f"; grep -E "PASSED|FAILED|ERROR|passed|failed|error| rc |SUMMARY" $OUT/$f.log | tail -n 12
done
echo "== warm_embed_ab"; grep -E "same bits|FAILED|rc |Error" $OUT/warm_embed_ab.log
echo "== warm_det_ab"; tail -n 6 $OUT/warm_det_ab.log
