#!/bin/bash
# Session 14, call 4: heads_view made from strides (no numba slicing): its GPU tests, the
# bf16 step against the reference, then the trainer's start-up twice on one kernel cache.
export PYTHONUNBUFFERED=1 MICROGPT_CACHE_DIR=/tmp/mgcache
ROOT=$PWD; T0=$(date +%s); D=$ROOT/.devtree/data
stamp() { echo "=== $(( $(date +%s) - T0 )) s: $*" | tee -a $OUT/summary.log; }
export PYTHONPATH=/tmp/site:$ROOT
tar -C /tmp -xzf .devtree/caches.tgz
stamp "A: tests"
MICROGPT_TEST_DEVICE=gpu MICROGPT_GPU_EXAMPLES=2 MICROGPT_TEST_KERNEL_CACHE=/tmp/tk timeout 100 python3 -m pytest -q -n 4 -p no:cacheprovider -rfE --tb=short \
  tests/test_kernels_attention.py::test_heads_views_are_what_the_copies_copy tests/test_kernels_flash_attention.py \
  tests/test_cuda_model.py::test_bf16_step_matches_reference_on_rounded_weights > $OUT/tests.log 2>&1
tail -n 4 $OUT/tests.log | tee -a $OUT/summary.log
stamp "B: start-up, warm warm"
timeout $(( 200 - $(date +%s) + T0 )) python3 tools/startup_time.py --runs warm warm --out $OUT/startup.md -- --config andrea-120m --vocab-size 4096 --data $D --tokenizer $D/tokenizer.json --batch-size 16 --steps 3 --cache-dir /tmp/mgcache > $OUT/startup.log 2>&1
tail -n 12 $OUT/startup.md >> $OUT/summary.log
stamp done
