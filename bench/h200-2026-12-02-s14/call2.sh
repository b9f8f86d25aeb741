#!/bin/bash
# Session 14, call 2: the whole GPU profile again after the layouts test's fix (the kernel
# cache of call 1 carried in .devtree/caches.tgz); then the captured GEMMs, old tree then
# new (issue 26's second parity figure); then tools/step_variants.py (issue 32's targets).
export PYTHONUNBUFFERED=1 MICROGPT_CACHE_DIR=/tmp/mgcache
J=$PWD/bench/h200-2026-12-02     # session 13's parity2.py, cached.py, profile_start.py
ROOT=$PWD; T0=$(date +%s)
stamp() { echo "=== $(( $(date +%s) - T0 )) s: $*" | tee -a $OUT/summary.log; }
export PYTHONPATH=/tmp/site:$ROOT
tar -C /tmp -xzf .devtree/caches.tgz
GPU="MICROGPT_TEST_DEVICE=gpu MICROGPT_GPU_EXAMPLES=1 MICROGPT_TEST_KERNEL_CACHE=/tmp/tk"
stamp "A: GPU profile (kernel tests + cuda model tests), at $(git rev-parse --short HEAD 2>/dev/null)"
( env $GPU OPENBLAS_NUM_THREADS=2 timeout 270 python3 -m pytest -v -n 9 -p no:cacheprovider -rfE --tb=short \
    tests/test_kernels_*.py tests/test_cuda_model.py -k "not andrea-120m" > $OUT/gpu-tests.log 2>&1
  echo "rc=$?" >> $OUT/gpu-tests.log ) &
A1=$!
( env $GPU OPENBLAS_NUM_THREADS=3 timeout 270 python3 -m pytest -v -n 3 -p no:cacheprovider -rfE --tb=short \
    tests/test_cuda_model.py -k "andrea-120m" > $OUT/gpu-tests-120m.log 2>&1
  echo "rc=$?" >> $OUT/gpu-tests-120m.log ) &
A2=$!
wait $A1; stamp "A1 done"; grep -E "^(FAILED|ERROR) | passed| failed|rc=" $OUT/gpu-tests.log | tail -15 | tee -a $OUT/summary.log
wait $A2; stamp "A2 done"; grep -E "^(FAILED|ERROR) | passed| failed|rc=" $OUT/gpu-tests-120m.log | tail -8 | tee -a $OUT/summary.log
stamp "B: captured GEMMs, old tree"
(cd .devtree/old && PYTHONPATH=/tmp/site:$PWD timeout 110 python3 tools/bench.py --only gemm --gemm-captured --reps 5 --out $OUT/gemm_old.md > /tmp/gemm_old.log 2>&1; echo "rc=$?" >> /tmp/gemm_old.log)
tail -n 3 /tmp/gemm_old.log >> $OUT/summary.log
stamp "B: captured GEMMs, new tree"
timeout 110 python3 $J/cached.py tools/bench.py --only gemm --gemm-captured --reps 5 --out $OUT/gemm_new.md > /tmp/gemm_new.log 2>&1; echo "rc=$?" >> /tmp/gemm_new.log
tail -n 3 /tmp/gemm_new.log >> $OUT/summary.log
stamp "C: step variants"
timeout $(( 585 - $(date +%s) + T0 )) python3 $J/cached.py tools/step_variants.py --reps 10 --out $OUT/step_variants.md 2>&1 | grep -v -i warn | tail -n 12 | tee -a $OUT/summary.log
stamp "done"
