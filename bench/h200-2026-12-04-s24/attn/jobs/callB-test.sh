#!/bin/bash
# call B (attn, <= 140 s beside the other helpers' tests). The tiles bench.sh sweeps,
# against float64 before their figures count (check_defaults.py: each pass's candidate
# beside the other's default, at (2, 3, 265, 64) and (1, 1, 4100, 64), or (1, 2, 2053, 128),
# both layouts), two checks a process: 1) the passes with a producer warpgroup donating
# its registers (new: BackwardTile.donate), with memcheck and racecheck of both passes so
# and of the defaults (their changes since call A);
# 2) the other candidate pairs; 3) the forward's D 64 candidates below LONG_T (no
# ping-pong; persistent blocks, with and without) and its routed long and D 128 tiles
# (their launch is hopper_operands.launch_pass now); 4) the backward's property test
# (its explicit examples, a donating one new); 5) the kernels of bench.sh (ab.py's main at
# 133880f and this tree, the sweeps') into the kernel cache.
S=bench/h200-2026-12-04-s24/attn
date -u | tee $OUT/date.txt
cp $S/jobs/commit.txt $OUT/ 2>/dev/null
# the tree it ran, to match with the branch's commits (no git history here)
sha1sum kernels/attention/*.py tests/test_kernels_attention*.py $S/*.py > $OUT/tree.sha1
export MICROGPT_TEST_DEVICE=gpu
CD="python3 $S/check_defaults.py"
check() {  # check LIMIT_S ARGS...: one check_defaults.py run, its log named by its arguments
  local limit=$1; shift; local args="$*"; local log="$OUT/check_${args//[ ,=]/_}.log"
  timeout $limit $CD "$@" > "$log" 2>&1; echo "rc $?" >> "$log"
}
(check 62 backward 64 dkdv=2,64,8,1,1,1; check 62 backward 64 dq=2,64,8,1,1,1) &
(check 62 backward 128 dkdv=2,32,4,1,1,1; check 62 backward 128 dq=2,64,4,1,1,1) &
(check 62 backward 64 dkdv=1,64,4,2,0; check 62 backward 64 dkdv=1,32,4,3,0) &
(check 62 backward 64 dkdv=2,64,4,1,0; check 62 backward 64 dq=1,64,4,2,1) &
(check 62 backward 64 dq=2,64,4,1,1; check 62 backward 128 dq=2,32,4,1,0) &
(check 62 backward 128 dq=1,64,4,1,0; check 62 backward 128 dkdv=1,32,4,2,0) &
(check 50 backward 128 dkdv=2,32,8,1,0; check 40 quick long 64; check 35 quick 128) &
(check 62 64 tile=2,64,4,0,0,2,0,0; check 62 64 tile=2,64,4,0,1,2,1,0) &
(check 62 64 tile=2,64,4,0,0,2,1,0; check 62 backward 128 dq=2,64,4,1,0) &
sanitize() {  # sanitize TOOL LIMIT_S NAME ARGS...: check_defaults.py under compute-sanitizer
  local tool=$1 limit=$2 name=$3; shift 3; local log=$OUT/${tool}_$name.log
  local extra=; [ $tool = racecheck ] && extra="--racecheck-report hazard"
  CUDA_LAUNCH_BLOCKING=1 timeout $limit compute-sanitizer --tool $tool $extra --error-exitcode 99 $CD "$@" 2>&1 \
    | grep -v "Warning\|warn(" | tail -8 > $log; echo "$tool rc ${PIPESTATUS[0]}" >> $log
}
D="dq=2,64,8,1,1,1 dkdv=2,64,8,1,1,1"
# the donating passes, and the defaults (their copies' prologue past the block's barrier,
# the dk/dv pass's statistics before its products: new)
(sanitize memcheck 62 bwd_donate backward quick 64 $D; sanitize memcheck 62 bwd_defaults backward quick 64 128) &
(sanitize racecheck 62 bwd_donate backward quick 64 $D; sanitize racecheck 62 bwd_defaults backward quick 64) &
(timeout 125 python3 $S/ab.py --warm > $OUT/warm_ab.log 2>&1; echo "rc $?" >> $OUT/warm_ab.log) &
(MICROGPT_GPU_EXAMPLES=1 timeout 125 python3 -m pytest -q -rA -p no:warnings -p no:cacheprovider \
   tests/test_kernels_attention_hopper_backward.py --hypothesis-seed=4 --hypothesis-verbosity=verbose > $OUT/pytest_bwd_4.log 2>&1; echo "rc $?" >> $OUT/pytest_bwd_4.log) &
for w in "--shapes 120m" "--backward --shapes 120m" "--backward --shapes d128"; do
  n=${w//--/}; n=$OUT/warm_sweep_${n// /_}.log
  (timeout 128 python3 $S/sweep.py --warm $w > "$n" 2>&1; echo "rc $?" >> "$n") &
done
wait
grep -H "passed\|failed\|rc \|ERROR SUMMARY\|RACECHECK SUMMARY\|FAIL\|check_defaults:" $OUT/*.log | grep -v ":E " | tail -60
echo "test.sh done at $SECONDS s"
