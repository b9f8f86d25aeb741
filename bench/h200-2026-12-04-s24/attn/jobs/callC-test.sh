#!/bin/bash
# call C (attn, <= 140 s beside the other helpers' tests): the defaults as routed after call
# B's sweeps, against float64 before their figures count. 1) the routed forward (default_tile)
# at ragged shapes each side of LONG_T and past it, D 128's, both layouts; the backward's
# defaults at (2, 3, 265, 64), (1, 1, 4100, 64), (1, 2, 2053, 128); 2) memcheck of the
# backward's and the forward's D 64 defaults, racecheck of the backward's D 64 one; 3) the
# backward's and the forward's property tests, the op's tests; 4) the kernels of bench.sh
# (ab.py's main at 133880f and this tree; the table's andrea-12m and head_dim 72 rows).
S=bench/h200-2026-12-04-s24/attn
date -u | tee $OUT/date.txt
cp $S/jobs/commit.txt $OUT/ 2>/dev/null
# the tree it ran, to match with the branch's commits (no git history here)
sha1sum kernels/attention/*.py tests/test_kernels_attention*.py $S/*.py > $OUT/tree.sha1
export MICROGPT_TEST_DEVICE=gpu
PT="python3 -m pytest -q -rA -p no:warnings -p no:cacheprovider"
CD="python3 $S/check_defaults.py"
check() {  # check LIMIT_S ARGS...: one check_defaults.py run, its log named by its arguments
  local limit=$1; shift; local args="$*"; local log="$OUT/check_${args//[ ,=]/_}.log"
  timeout $limit $CD "$@" > "$log" 2>&1; echo "rc $?" >> "$log"
}
sanitize() {  # sanitize TOOL LIMIT_S NAME ARGS...: check_defaults.py under compute-sanitizer
  local tool=$1 limit=$2 name=$3; shift 3; local log=$OUT/${tool}_$name.log
  local extra=; [ $tool = racecheck ] && extra="--racecheck-report hazard"
  CUDA_LAUNCH_BLOCKING=1 timeout $limit compute-sanitizer --tool $tool $extra --error-exitcode 99 $CD "$@" 2>&1 \
    | grep -v "Warning\|warn(" | tail -8 > $log; echo "$tool rc ${PIPESTATUS[0]}" >> $log
}
(check 125 64) &
(check 62 128; check 62 backward 128) &
(check 125 backward 64) &
(sanitize memcheck 125 bwd_defaults backward quick 64 128) &
(sanitize racecheck 125 bwd_defaults backward quick 64) &
(sanitize memcheck 62 fwd_defaults quick 64; sanitize racecheck 62 fwd_defaults quick 64) &
(MICROGPT_GPU_EXAMPLES=1 timeout 125 $PT tests/test_kernels_attention_hopper_backward.py --hypothesis-seed=5 --hypothesis-verbosity=verbose > $OUT/pytest_bwd_5.log 2>&1; echo "rc $?" >> $OUT/pytest_bwd_5.log) &
(MICROGPT_GPU_EXAMPLES=3 timeout 125 $PT tests/test_kernels_attention_hopper.py --hypothesis-seed=9 > $OUT/pytest_fwd_9.log 2>&1; echo "rc $?" >> $OUT/pytest_fwd_9.log) &
(MICROGPT_GPU_EXAMPLES=2 timeout 125 $PT tests/test_kernels_attention.py > $OUT/pytest_ops.log 2>&1; echo "rc $?" >> $OUT/pytest_ops.log) &
(timeout 125 python3 $S/ab.py --warm > $OUT/warm_ab.log 2>&1; echo "rc $?" >> $OUT/warm_ab.log) &
(timeout 125 python3 $S/attention_bench.py --warm --rows andrea-12m "head_dim 72" > $OUT/warm_bench.log 2>&1; echo "rc $?" >> $OUT/warm_bench.log) &
wait
grep -H "passed\|failed\|rc \|ERROR SUMMARY\|RACECHECK SUMMARY\|FAIL\|check_defaults:" $OUT/*.log | grep -v ":E " | tail -60
echo "test.sh done at $SECONDS s"
