#!/bin/bash
# bias (issue 32), session 16, call C: call B's tests passed; the one test changed since
# (the LayerNorm backward's third set at its shared-memory limit, 4084 columns) and the
# column sums of a view, on the GPU; beside them the plain and biased steps compiled into
# the kernel cache for bench.sh.
C=bench/h200-2026-12-02/cached.py
F="NumbaPerformanceWarning\|warn(errors\|^  warnings.warn"
echo "== $(date -u +%T) start; cache ${MICROGPT_CACHE_DIR:-unset}"
( timeout 150 python3 $C tools/step_variants.py --reps 1 --no-accum --out $OUT/warm.md > $OUT/warm.log 2>&1
  echo "warm rc $?" >> $OUT/warm.log ) &
MICROGPT_TEST_DEVICE=gpu MICROGPT_GPU_EXAMPLES=6 MICROGPT_TEST_KERNEL_CACHE=${MICROGPT_TEST_KERNEL_CACHE:-/tmp/tk} \
  timeout 150 python3 -m pytest -x -q -n 2 -p no:cacheprovider \
  tests/test_kernels_layernorm.py::test_backward_at_the_shared_memory_limit \
  tests/test_kernels_optim.py::test_bias_backward > $OUT/pytest.log 2>&1
rc=$?
echo "pytest rc $rc" >> $OUT/pytest.log
wait
for f in pytest warm; do echo "== $f"; grep -v "$F" $OUT/$f.log | tail -12; done
echo "== $(date -u +%T) end"
exit $rc
