#!/bin/bash
# call B (attn, <= 90 s): compile the timing script's variants (background), the wgmma
# backward's GPU tests, memcheck on it
set -x
for p in 0 1 2 3; do
  timeout 85 python3 jobs_attn/time_bwd.py --warm $p 4 --shapes 120m > $OUT/warm_$p.log 2>&1 &
done
MICROGPT_TEST_DEVICE=gpu MICROGPT_GPU_EXAMPLES=1 timeout 62 python3 -m pytest -q -x -p no:warnings \
  tests/test_kernels_attention_hopper_backward.py 2>&1 | grep -v "Warning\|warn(" | tail -25 | tee $OUT/pytest.log
left=$((86 - SECONDS)); [ $left -gt 5 ] && timeout $left compute-sanitizer --tool memcheck python3 jobs_attn/sanitize.py 1 2>&1 | grep -v "Warning\|warn(" | tail -12 | tee $OUT/memcheck.log
wait
echo "test.sh done at $SECONDS s"
