#!/bin/bash
# Session 13, call 3: GPU tests of the changed embedding/LayerNorm/reductions beside both trees
# compiling; parity old/new (26) with the new tree's profile; converge andrea-120m, seed 0 (31).
export PYTHONUNBUFFERED=1 MICROGPT_CACHE_DIR=/tmp/mgcache
ROOT=$PWD; J=$ROOT/.devtree/jobs; T0=$(date +%s); SIG=/tmp/sig; mkdir -p $SIG
stamp() { echo "=== $(( $(date +%s) - T0 )) s: $*" | tee -a $OUT/summary.log; }
export PYTHONPATH=/tmp/site:$ROOT
stamp "A: GPU tests beside both trees compiling"
( MICROGPT_TEST_DEVICE=gpu MICROGPT_GPU_EXAMPLES=1 timeout 165 python3 -m pytest -v -n 8 -p no:cacheprovider -rfE --tb=short \
   tests/test_kernels_embedding.py tests/test_kernels_layernorm.py tests/test_kernels_optim.py tests/test_compile.py \
   "tests/test_cuda_model.py::test_two_runs_of_a_seed_give_the_same_bits" "tests/test_cuda_model.py::test_captured_steps_match_reference" \
   "tests/test_cuda_model.py::test_cuda_steps_match_reference" "tests/test_cuda_model.py::test_bf16_step_matches_reference_on_rounded_weights" \
   > $OUT/gpu-tests.log 2>&1; echo "rc=$?" >> $OUT/gpu-tests.log ) &
TESTS=$!
(cd .devtree/old && PYTHONPATH=/tmp/site:$PWD timeout 300 python3 $J/parity2.py old $SIG - > /tmp/old.log 2>&1) &
KERNEL_CACHE=/tmp/mgcache/kernels timeout 300 python3 $J/parity2.py new $SIG $OUT/prof_new.md > /tmp/new.log 2>&1 &
wait $TESTS; stamp "tests done: $(grep -c PASSED $OUT/gpu-tests.log) passed"
grep -E "^(FAILED|ERROR) |passed|failed" $OUT/gpu-tests.log | tail -12 | tee -a $OUT/summary.log
for l in old new; do
  for i in $(seq 120); do [ -e $SIG/ready-$l ] && break; sleep 1; done
  stamp "B: timing $l"; touch $SIG/go-$l
  for i in $(seq 90); do [ -e $SIG/done-$l ] && break; sleep 1; done
  grep parity /tmp/$l.log | tee -a $OUT/summary.log; tail -2 /tmp/$l.log >> $OUT/summary.log
done
stamp "C: converge andrea-120m, seed 0, 1000 steps"
D=$ROOT/.devtree/data
timeout 175 python3 tools/converge.py --config andrea-120m --vocab-size 4096 --data $D --tokenizer $D/tokenizer.json --steps 1000 --batch-size 16 --lr 6e-4 --warmup 50 --seeds 0 --eval-every 250 --curve-windows 32 --log-every 50 --no-torch-compile --out $OUT/andrea-120m 2>&1 | grep -v -E "Warning|warn\(" > $OUT/converge.log
tail -22 $OUT/converge.log | tee -a $OUT/summary.log
stamp "done"
