#!/bin/bash
# Session 13, call 2: the GPU tests call 1 did not reach (and the changed LayerNorm's) beside
# both trees' compilation; then parity old/new + per-op profiles (26); then converge 12m (31).
export PYTHONUNBUFFERED=1 MICROGPT_CACHE_DIR=/tmp/mgcache
ROOT=$PWD; J=$ROOT/.devtree/jobs; T0=$(date +%s); SIG=/tmp/sig; mkdir -p $SIG
stamp() { echo "=== $(( $(date +%s) - T0 )) s: $*" | tee -a $OUT/summary.log; }
export PYTHONPATH=/tmp/site:$ROOT
grep -v -E "test_kernels_layernorm|bias|two_runs" $J/passed_call1.txt > /tmp/deselect.txt
stamp "A: the rest of the GPU tests, beside both trees compiling"
( MICROGPT_TEST_DEVICE=gpu MICROGPT_GPU_EXAMPLES=1 timeout 230 python3 - > $OUT/gpu-tests.log 2>&1 <<'PY'
import sys, pytest
args = ["-v", "-n", "10", "-p", "no:cacheprovider", "-rfE", "--tb=short",
        "tests/test_kernels_pipelines.py"] + sorted(
    set(__import__("glob").glob("tests/test_kernels_*.py")) - {"tests/test_kernels_pipelines.py"}) + [
        "tests/test_cuda_model.py", "tests/test_generate.py", "tests/test_export_hf.py",
        "tests/test_compile.py"]
args += ["--deselect=" + line for line in open("/tmp/deselect.txt").read().splitlines()]
sys.exit(pytest.main(args))
PY
echo "rc=$?" >> $OUT/gpu-tests.log ) &
TESTS=$!
(cd .devtree/old && PYTHONPATH=/tmp/site:$PWD timeout 400 python3 $J/parity2.py old $SIG $OUT/prof_old.md > /tmp/old.log 2>&1) &
timeout 400 python3 $J/parity2.py new $SIG $OUT/prof_new.md > /tmp/new.log 2>&1 &
wait $TESTS; stamp "tests done: $(grep -c PASSED $OUT/gpu-tests.log) passed"
grep -E "^(FAILED|ERROR) |passed|failed" $OUT/gpu-tests.log | tail -12 | tee -a $OUT/summary.log
for l in old new; do
  for i in $(seq 300); do [ -e $SIG/ready-$l ] && break; sleep 1; done
  stamp "B: timing $l"; touch $SIG/go-$l
  for i in $(seq 200); do [ -e $SIG/done-$l ] && break; sleep 1; done
  grep parity /tmp/$l.log | tee -a $OUT/summary.log; tail -2 /tmp/$l.log >> $OUT/summary.log
done
stamp "C: converge andrea-12m, 3 seeds x 1000 steps"
D=$ROOT/.devtree/data
timeout 200 python3 tools/converge.py --config andrea-12m --data $D --tokenizer $D/tokenizer.json --steps 1000 --batch-size 64 --lr 1e-3 --warmup 50 --seeds 0 1 2 --eval-every 250 --curve-windows 64 --log-every 50 --no-torch-compile --out $OUT/andrea-12m 2>&1 | grep -v -E "Warning|warn\(" > $OUT/converge.log
tail -25 $OUT/converge.log | tee -a $OUT/summary.log
stamp "done"
