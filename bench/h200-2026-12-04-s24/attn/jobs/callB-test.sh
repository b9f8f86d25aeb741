#!/bin/bash
# call B (attn, <= 140 s beside the other helpers' tests). The tiles bench.sh sweeps,
# against float64 before their figures count: 1) the backward's candidate pairs
# (check_defaults.py backward dq= / dkdv=: each pass's candidate beside the other's
# default, at (1, 1, 4100, 64) or (1, 2, 2053, 128), both layouts); 2) the forward's D 64
# candidates below LONG_T (no ping-pong; persistent blocks, with and without) at ragged
# shapes, both layouts; 3) the sweeps' kernels into the kernel cache for bench.sh.
S=bench/h200-2026-12-04-s24/attn
date -u | tee $OUT/date.txt
cp $S/jobs/commit.txt $OUT/ 2>/dev/null
export MICROGPT_TEST_DEVICE=gpu
CD="python3 $S/check_defaults.py"
for c in "64 dkdv=1,64,4,2,0" "64 dkdv=1,32,4,3,0" "64 dkdv=2,64,4,1,0" "64 dq=1,64,4,2,1" "64 dq=2,64,4,1,1" \
         "128 dq=2,32,4,1,0" "128 dq=1,64,4,1,0" "128 dkdv=1,32,4,2,0" "128 dkdv=2,32,8,1,0"; do
  (timeout 125 $CD backward $c > "$OUT/check_bwd_${c// /_}.log" 2>&1; echo "rc $?" >> "$OUT/check_bwd_${c// /_}.log") &
done
for t in 2,64,4,0,0,2,0,0 2,64,4,0,1,2,1,0 2,64,4,0,0,2,1,0; do
  (timeout 125 $CD 64 tile=$t > $OUT/check_fwd_$t.log 2>&1; echo "rc $?" >> $OUT/check_fwd_$t.log) &
done
(timeout 128 python3 $S/sweep.py --warm > $OUT/warm_sweep.log 2>&1; echo "rc $?" >> $OUT/warm_sweep.log) &
(timeout 128 python3 $S/sweep.py --warm --backward > $OUT/warm_sweep_bwd.log 2>&1; echo "rc $?" >> $OUT/warm_sweep_bwd.log) &
wait
grep -H "passed\|failed\|rc \|ERROR SUMMARY\|RACECHECK SUMMARY\|FAIL\|check_defaults:" $OUT/*.log | grep -v ":E " | tail -50
echo "test.sh done at $SECONDS s"
