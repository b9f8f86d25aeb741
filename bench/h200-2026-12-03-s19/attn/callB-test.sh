#!/bin/bash
# call B (attn, <= 110 s): the wgmma backward's GPU tests (hopper_backward.py, stages up to
# 8), memcheck and racecheck on it; the timing script's variants compiled meanwhile
set -x
date -u | tee $OUT/date.txt
for p in 0 1 2 3; do
  timeout 100 python3 jobs_attn/time_bwd.py --warm $p 4 > $OUT/warm_$p.log 2>&1 &
done
MICROGPT_TEST_DEVICE=gpu MICROGPT_GPU_EXAMPLES=1 timeout 70 python3 -m pytest -q -x -p no:warnings \
  tests/test_kernels_attention_hopper_backward.py 2>&1 | grep -v "Warning\|warn(" | tail -25 | tee $OUT/pytest.log
timeout 20 compute-sanitizer --tool memcheck python3 jobs_attn/sanitize.py 1 2>&1 | grep -v "Warning\|warn(" | tail -12 | tee $OUT/memcheck.log
left=$((106 - SECONDS)); [ $left -gt 5 ] && timeout $left compute-sanitizer --tool racecheck python3 jobs_attn/sanitize.py 1 2>&1 | grep -v "Warning\|warn(" | tail -12 | tee $OUT/racecheck.log
wait
echo "test.sh done at $SECONDS s"
