#!/bin/bash
# bias (issue 32), session 16: the fused bias sums' GPU tests (-n 2: the LayerNorm
# backward with dinp_sum, gelu_bias_backward, the MLP products with b_fc's gradient, the
# bf16 step with biases against the reference); beside them the plain and biased steps
# and micro.py's kernels compiled into the kernel cache (/tmp/mgcache/kernels) for bench.sh.
R=bench/h200-2026-12-02-s16/bias; C=bench/h200-2026-12-02/cached.py
F="NumbaPerformanceWarning\|warn(errors\|^  warnings.warn"
echo "== $(date -u +%T) start; cache ${MICROGPT_CACHE_DIR:-unset}; tree $(git rev-parse --short HEAD 2>/dev/null)"
( timeout 150 python3 $C tools/step_variants.py --reps 1 --no-accum --out $OUT/warm.md > $OUT/warm.log 2>&1
  echo "warm rc $?" >> $OUT/warm.log ) &
( timeout 150 python3 $C $R/micro.py > $OUT/warm_micro.log 2>&1; echo "micro rc $?" >> $OUT/warm_micro.log ) &
MICROGPT_TEST_DEVICE=gpu MICROGPT_GPU_EXAMPLES=3 MICROGPT_TEST_KERNEL_CACHE=${MICROGPT_TEST_KERNEL_CACHE:-/tmp/tk} \
  timeout 155 python3 -m pytest -x -q -n 2 -p no:cacheprovider \
  tests/test_kernels_optim.py::test_gelu_bias_backward \
  tests/test_kernels_optim.py::test_gelu_bias_backward_of_an_array_off_its_group \
  tests/test_kernels_optim.py::test_bias_backward \
  "tests/test_kernels_layernorm.py::test_layernorm_backward_accumulates" \
  tests/test_kernels_layernorm.py::test_default_blocks_at_their_caps \
  tests/test_kernels_layernorm.py::test_backward_at_the_shared_memory_limit \
  tests/test_kernels_gemm.py::test_the_mlp_up_projection_adds_its_bias_before_the_gelu \
  tests/test_cuda_model.py::test_bf16_step_matches_reference_on_rounded_weights \
  > $OUT/pytest.log 2>&1
rc=$?
echo "pytest rc $rc" >> $OUT/pytest.log
wait
for f in pytest warm warm_micro; do echo "== $f"; grep -v "$F" $OUT/$f.log | tail -25; done
echo "== $(date -u +%T) end"
exit $rc
