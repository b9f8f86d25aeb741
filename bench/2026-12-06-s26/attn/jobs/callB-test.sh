#!/bin/bash
# Session 26 call B (attn, <= ~150 s beside the other helpers' tests): the wgmma backward
# with the donating producer warpgroup routed as its default (both passes at D 128, the
# dk/dv pass at D 64), session 24's b1 and b2 reverted (A/B'd from patches by bench.sh).
# 1) the defaults against float64 (check_defaults.py backward: (2, 3, 265, 64),
#    (1, 1, 4100, 64), (1, 2, 2053, 128), both layouts) and the candidate tiles of one
#    computing warpgroup with a donating producer, two blocks an SM, for both passes
#    (check_tile takes them now for the dk/dv pass: 232 registers a thread); 2) memcheck of the defaults at D 64 and 128, racecheck at each;
# 3) the backward's GPU property test (Hypothesis, one drawn example); 4) ncu of the new
# default passes at andrea-120m (counts: the other jobs run beside); 5) ab.py's variants
# (the patches' modules, the candidate tiles) compiled into the kernel cache for bench.sh.
# Every part has its own timeout and log; "PASS"/"0 failed" lines are what count.
S=bench/2026-12-06-s26/attn
S24=bench/h200-2026-12-04-s24/attn
date -u | tee $OUT/date.txt
# the tree it ran, to match with the branch's commits (no git history here)
sha1sum kernels/attention/*.py tests/test_kernels_attention*.py $S/*.py $S/*.txt \
  $S24/main_kernels/*.py > $OUT/tree.sha1
export MICROGPT_TEST_DEVICE=gpu
timeout 20 python3 $S/ab.py --prepare > $OUT/prepare.log 2>&1; echo "prepare rc $?" >> $OUT/prepare.log
warm() {  # warm NAME "SHAPES" VARIANTS...: ab.py --warm (small shapes of the same widths
  # and forward tiles) for the kernel cache
  local log=$OUT/warm_$1.log shapes=$2; shift 2
  timeout 130 python3 $S/ab.py --warm --shapes $shapes --variants "$@" 2>&1 \
    | grep -v "Warning\|warn(" > $log; echo "warm rc ${PIPESTATUS[0]}" >> $log
}
(warm b1 "120m d128" b1:main) &
(warm b2 "120m d128" b2:main b2:this) &
(warm this "120m 4096 d128" main this) &
(warm tiles "120m d128" this:dq2 this:dq2d this:kv2d) &
CD="python3 $S24/check_defaults.py"
check() {  # check LIMIT_S ARGS...: one check_defaults.py run, its log named by its arguments
  local limit=$1; shift; local args="$*"; local log="$OUT/check_${args//[ ,=]/_}.log"
  timeout $limit $CD "$@" 2>&1 | grep -v "Warning\|warn(" > "$log"; echo "rc ${PIPESTATUS[0]}" >> "$log"
}
(check 130 backward 64) &
(check 130 backward 128) &
(check 130 backward 64 dq=1,64,4,2,1,1 dkdv=1,64,4,2,1,1) &
(check 130 backward 128 dq=1,32,4,2,1,1 dkdv=1,32,4,2,1,1) &
sanitize() {  # sanitize TOOL LIMIT_S NAME ARGS...: check_defaults.py under compute-sanitizer
  local tool=$1 limit=$2 name=$3; shift 3; local log=$OUT/${tool}_$name.log
  local extra=; [ $tool = racecheck ] && extra="--racecheck-report hazard"
  CUDA_LAUNCH_BLOCKING=1 timeout $limit compute-sanitizer --tool $tool $extra --error-exitcode 99 $CD "$@" 2>&1 \
    | grep -v "Warning\|warn(" | tail -8 > $log; echo "$tool rc ${PIPESTATUS[0]}" >> $log
}
(sanitize memcheck 130 bwd_64_128 backward quick 64 128) &
(sanitize racecheck 130 bwd_64 backward quick 64) &
(sanitize racecheck 130 bwd_128 backward quick 128) &
(MICROGPT_GPU_EXAMPLES=1 timeout 130 python3 -m pytest -q -rA -p no:warnings -p no:cacheprovider \
   tests/test_kernels_attention_hopper_backward.py --hypothesis-seed=5 > $OUT/pytest_bwd_5.log 2>&1
 echo "rc $?" >> $OUT/pytest_bwd_5.log) &
for p in dkdv dq; do
  (timeout 120 ncu --clock-control none --kernel-name regex:backward_$p --launch-skip 2 --launch-count 1 \
     --set full --import-source no -f -o $OUT/bwd_${p}_120m python3 $S24/attn_ncu.py 120m backward > $OUT/ncu_$p.log 2>&1
   echo "ncu rc $?" >> $OUT/ncu_$p.log
   timeout 8 ncu --import $OUT/bwd_${p}_120m.ncu-rep --page details --print-details all > $OUT/bwd_${p}_120m_details.txt 2>&1
   timeout 8 ncu --import $OUT/bwd_${p}_120m.ncu-rep --page source --print-source sass --csv > $OUT/bwd_${p}_120m_sass.csv 2>&1
   timeout 8 python3 $S24/sass_mix.py $OUT/bwd_${p}_120m_sass.csv > $OUT/bwd_${p}_120m_mix.txt 2>&1
   rm -f $OUT/bwd_${p}_120m.ncu-rep; gzip -f $OUT/bwd_${p}_120m_sass.csv) &
done
wait
grep -H "passed\|failed\|rc \|ERROR SUMMARY\|RACECHECK SUMMARY\|FAIL\|Error" $OUT/*.log | grep -v ":E " | tail -60
echo "test.sh done at $SECONDS s"
