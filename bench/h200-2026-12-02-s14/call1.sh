#!/bin/bash
# Session 14, call 1: the whole GPU profile of issue 26 (the kernel tests and the cuda model
# tests, andrea-120m's cases in a pytest of their own so they start at once) beside both
# trees compiling their captured steps; then the parity timing, old then new (parity2.py).
export PYTHONUNBUFFERED=1 MICROGPT_CACHE_DIR=/tmp/mgcache
J=$PWD/bench/h200-2026-12-02     # session 13's parity2.py, cached.py, profile_start.py
ROOT=$PWD; T0=$(date +%s); SIG=/tmp/sig; mkdir -p $SIG
stamp() { echo "=== $(( $(date +%s) - T0 )) s: $*" | tee -a $OUT/summary.log; }
export PYTHONPATH=/tmp/site:$ROOT
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader >> $OUT/summary.log
python3 -c "import numba, numba_cuda, numpy; print('numba', numba.__version__, 'numba-cuda', numba_cuda.__version__, 'numpy', numpy.__version__)" >> $OUT/summary.log 2>&1
GPU="MICROGPT_TEST_DEVICE=gpu MICROGPT_GPU_EXAMPLES=1 MICROGPT_TEST_KERNEL_CACHE=/tmp/tk"
stamp "A: GPU profile (kernel tests + cuda model tests) beside both trees compiling"
( env $GPU OPENBLAS_NUM_THREADS=2 timeout 380 python3 -m pytest -v -n 9 -p no:cacheprovider -rfE --tb=short \
    tests/test_kernels_*.py tests/test_cuda_model.py -k "not andrea-120m" > $OUT/gpu-tests.log 2>&1
  echo "rc=$?" >> $OUT/gpu-tests.log ) &
A1=$!
( env $GPU OPENBLAS_NUM_THREADS=3 timeout 380 python3 -m pytest -v -n 3 -p no:cacheprovider -rfE --tb=short \
    tests/test_cuda_model.py -k "andrea-120m" > $OUT/gpu-tests-120m.log 2>&1
  echo "rc=$?" >> $OUT/gpu-tests-120m.log ) &
A2=$!
(cd .devtree/old && PYTHONPATH=/tmp/site:$PWD timeout 560 python3 $J/parity2.py old $SIG - > /tmp/old.log 2>&1) &
KERNEL_CACHE=/tmp/mgcache/kernels timeout 560 python3 $J/parity2.py new $SIG $OUT/prof_new.md > /tmp/new.log 2>&1 &
wait $A1; stamp "A1 done"; grep -E "^(FAILED|ERROR) | passed| failed|rc=" $OUT/gpu-tests.log | tail -15 | tee -a $OUT/summary.log
wait $A2; stamp "A2 done"; grep -E "^(FAILED|ERROR) | passed| failed|rc=|PASSED" $OUT/gpu-tests-120m.log | tail -8 | tee -a $OUT/summary.log
for l in old new; do
  for i in $(seq 60); do [ -e $SIG/ready-$l ] && break; sleep 1; done
  stamp "B: timing $l"; touch $SIG/go-$l
  for i in $(seq 100); do [ -e $SIG/done-$l ] && break; sleep 1; done
  grep parity /tmp/$l.log | tee -a $OUT/summary.log; tail -n2 /tmp/$l.log >> $OUT/summary.log
done
stamp "C: caches"
tar -C /tmp -czf - tk mgcache/kernels | split -b 15M - $OUT/caches.tgz.
ls -la $OUT >> $OUT/summary.log
stamp "done"
