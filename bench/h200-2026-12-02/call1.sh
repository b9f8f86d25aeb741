#!/bin/bash
# Session 13, call 1: GPU test profile (26) beside warm-ups; then quiet-GPU timings:
# parity old/new (26), step variants (32), generate (30), start-up (29).
export PYTHONUNBUFFERED=1 MICROGPT_CACHE_DIR=/tmp/mgcache
ROOT=$PWD; J=$ROOT/.devtree/jobs; T0=$(date +%s)
stamp() { echo "=== $(( $(date +%s) - T0 )) s: $*" | tee -a $OUT/summary.log; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/summary.log
python3 -c "import torch, numba, numpy; import numba.cuda as c; print(torch.__version__, numba.__version__, numpy.__version__)" | tee -a $OUT/summary.log
export PYTHONPATH=/tmp/site:$ROOT
stamp "A: GPU tests (-n 11) beside the new code's warm-ups"
( MICROGPT_TEST_DEVICE=gpu MICROGPT_GPU_EXAMPLES=1 timeout 215 python3 -m pytest -v -n 11 -p no:cacheprovider -rfE \
    tests/test_kernels_*.py tests/test_cuda_model.py tests/test_generate.py tests/test_export_hf.py tests/test_compile.py \
    > $OUT/gpu-tests.log 2>&1; echo "rc=$?" >> $OUT/gpu-tests.log ) &
TESTS=$!
( timeout 200 python3 $J/cached.py $J/parity.py warmup > $OUT/warm.log 2>&1
  timeout 100 python3 $J/cached.py tools/step_variants.py --out /tmp/sv_warm.md --reps 2 >> $OUT/warm.log 2>&1
  timeout 100 python3 $J/cached.py tools/bench.py --only generate --gen-tokens 20 --reps 1 --out /tmp/gen_warm.md >> $OUT/warm.log 2>&1
  echo warmups-done >> $OUT/warm.log ) &
WARM=$!
wait $TESTS; stamp "tests done: $(grep -c PASSED $OUT/gpu-tests.log) passed, $(grep -c -E '(FAILED|ERROR) ' $OUT/gpu-tests.log) failed/error lines"
grep -E "^(FAILED|ERROR) " $OUT/gpu-tests.log | head -20 | tee -a $OUT/summary.log
wait $WARM; stamp "warm-ups done"; tail -3 $OUT/warm.log >> $OUT/summary.log
stamp "B1: parity old (a23e5f2, cold compile)"
(cd .devtree/old && PYTHONPATH=/tmp/site:$PWD timeout 110 python3 $J/parity.py old 2>&1 | grep parity | tee -a $OUT/summary.log)
stamp "B2: parity new"
timeout 50 python3 $J/cached.py $J/parity.py new 2>&1 | grep parity | tee -a $OUT/summary.log
stamp "B3: step variants (32)"
timeout 60 python3 $J/cached.py tools/step_variants.py --out $OUT/STEP_VARIANTS.md --reps 20 2>&1 | tail -6 | tee -a $OUT/summary.log
stamp "B4: generate (30)"
timeout 80 python3 $J/cached.py tools/bench.py --only generate --out $OUT/generate.md 2>&1 | tail -4 | tee -a $OUT/summary.log
stamp "B5: start-up (29): warm run under cProfile, then startup_time warm"
D=.devtree/data
timeout 45 python3 $J/profile_start.py --config andrea-120m --batch-size 16 --steps 3 --data $D --tokenizer $D/tokenizer.json --cache-dir /tmp/mgcache --out /tmp/run_prof > $OUT/startup-prof.log 2>&1
head -3 $OUT/startup-prof.log >> $OUT/summary.log; grep "to the first" $OUT/startup-prof.log >> $OUT/summary.log
timeout 50 python3 tools/startup_time.py --runs warm warm --out $OUT/startup.md -- --config andrea-120m --batch-size 16 --steps 3 --data $D --tokenizer $D/tokenizer.json --cache-dir /tmp/mgcache 2>&1 | tail -5 | tee -a $OUT/summary.log
stamp "done"
tar -czf $OUT/mgcache.tgz -C /tmp/mgcache kernels 2>/dev/null; ls -la $OUT/mgcache.tgz | tee -a $OUT/summary.log
