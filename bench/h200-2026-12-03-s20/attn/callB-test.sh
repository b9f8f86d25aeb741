#!/bin/bash
# call B (attn, <= 150 s, beside the other jobs' tests): branch s20-attn (32-bit descriptors,
# warp-uniform warpgroup index, shared products): the GPU tests of the Hopper forward and
# backward and of the atoms, memcheck and racecheck of both (D 64 and 128), ncu of the three
# wgmma kernels at andrea-120m; the bench's variants compiled meanwhile
set -x
S=bench/h200-2026-12-03-s20/attn
date -u | tee $OUT/date.txt
git log --oneline -3 > $OUT/commit.txt 2>&1
mkdir -p $OUT/sass
for p in 0 1 2 3; do
  timeout 125 python3 $S/time_attn.py --warm $p 4 --variants B --shapes 120m d128 4096 12m > $OUT/warm_$p.log 2>&1 &
done
(timeout 120 compute-sanitizer --tool memcheck --error-exitcode 99 python3 $S/sanitize.py 64 128 \
  2>&1 | grep -v "Warning\|warn(" > $OUT/memcheck.log; echo "memcheck rc ${PIPESTATUS[0]}" >> $OUT/memcheck.log) &
(timeout 140 compute-sanitizer --tool racecheck --racecheck-report hazard --error-exitcode 99 \
  python3 $S/sanitize.py 64 128 2>&1 | grep -v "Warning\|warn(" > $OUT/racecheck.log; echo "racecheck rc ${PIPESTATUS[0]}" >> $OUT/racecheck.log) &
(MICROGPT_TEST_DEVICE=gpu MICROGPT_GPU_EXAMPLES=2 timeout 140 python3 -m pytest -q -x -p no:warnings \
  -p no:cacheprovider tests/test_kernels_attention_hopper_backward.py tests/test_kernels_attention_hopper.py \
  tests/test_kernels_mma.py 2>&1 | tail -25 > $OUT/pytest.log) &
SECTIONS="--section SpeedOfLight --section LaunchStats --section Occupancy --section WarpStateStats --section InstructionStats --section SchedulerStats --section ComputeWorkloadAnalysis --section SourceCounters --metrics sass__inst_executed_per_opcode"
SASS_DIR=$OUT/sass timeout 110 ncu --clock-control none -k regex:hopper --launch-skip 3 --launch-count 3 \
  $SECTIONS -o $OUT/ncu_120m -f python3 $S/prof.py 120m hbwd 2>&1 | grep -v "Warning\|warn(" | tail -30 > $OUT/ncu.log
if [ -f $OUT/ncu_120m.ncu-rep ]; then
  timeout 20 ncu --import $OUT/ncu_120m.ncu-rep --page details > $OUT/ncu_120m_details.txt 2>&1
  timeout 30 ncu --import $OUT/ncu_120m.ncu-rep --page source --csv --print-source sass > $OUT/ncu_120m_source.csv 2>&1
  gzip -f $OUT/ncu_120m_source.csv
  rm -f $OUT/ncu_120m.ncu-rep
fi
wait
echo "test.sh done at $SECONDS s"
