#!/bin/bash
# session 27 call 3: session 24's b2 (the dk/dv pass's lse and delta loaded before its products) on the
# donating defaults: float64 checks, sanitizers, the property test; the kv2d tile (one computing
# warpgroup and a donating producer, two blocks an SM, for the dk/dv pass) with b2 likewise;
# session 28's fold (dq by the dk/dv pass's bulk adds, dkdv=2,64,8,1,1,1,1, D 64) likewise
echo "tree at $(cat commit.txt)"; export MICROGPT_TEST_DEVICE=gpu
S=bench/2026-12-06-s26/attn; CD="python3 bench/h200-2026-12-04-s24/attn/check_defaults.py"
timeout 20 python3 $S/ab.py --prepare > $OUT/prepare.log 2>&1
(timeout 100 python3 $S/ab.py --warm --shapes 120m d128 --variants main this this:kv2d this:dq2 this:fold > $OUT/warm.log 2>&1; echo "warm rc $?" >> $OUT/warm.log) &
check() { local limit=$1; shift; local log="$OUT/check_$(echo "$*" | tr ' ,=' '___').log"
  timeout $limit $CD "$@" 2>&1 | grep -v "Warning\|warn(" > "$log"; echo "rc ${PIPESTATUS[0]}" >> "$log"; }
(check 100 backward 64) & (check 100 backward 128) &
(check 100 backward 64 dkdv=1,64,4,2,1,1) & (check 100 backward 128 dkdv=1,32,4,2,1,1) &
(check 100 backward 64 dkdv=2,64,8,1,1,1,1) &
san() { local tool=$1 name=$2; shift 2; local log=$OUT/${tool}_$name.log extra=
  [ $tool = racecheck ] && extra="--racecheck-report hazard"
  CUDA_LAUNCH_BLOCKING=1 timeout 100 compute-sanitizer --tool $tool $extra --error-exitcode 99 $CD "$@" 2>&1 \
    | grep -v "Warning\|warn(" | tail -6 > $log; echo "$tool rc ${PIPESTATUS[0]}" >> $log; }
(san memcheck d64_128 backward quick 64 128) & (san racecheck d64 backward quick 64) & (san racecheck d128 backward quick 128) &
(san memcheck fold backward quick 64 dkdv=2,64,8,1,1,1,1) & (san racecheck fold backward quick 64 dkdv=2,64,8,1,1,1,1) &
(san memcheck kv2d backward quick 64 dkdv=1,64,4,2,1,1) & (san racecheck kv2d_64 backward quick 64 dkdv=1,64,4,2,1,1) & (san racecheck kv2d_128 backward quick 128 dkdv=1,32,4,2,1,1) &
(MICROGPT_GPU_EXAMPLES=1 timeout 100 python3 -m pytest -q -p no:warnings -p no:cacheprovider \
   tests/test_kernels_attention_hopper_backward.py --hypothesis-seed=7 > $OUT/pytest_bwd.log 2>&1; echo "rc $?" >> $OUT/pytest_bwd.log) &
wait
grep -H "passed\|failed\|rc \|ERROR SUMMARY\|RACECHECK SUMMARY\|FAIL\|Error" $OUT/*.log | grep -v ":E " | tail -40
