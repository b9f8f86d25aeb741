#!/bin/bash
# conv (issue 31), call B: the converge tests on the device, the GPU path of the new
# process-per-trainer layout at a few steps (which also fills the kernel cache and the
# matplotlib font cache for bench.sh), det_cost.py at 1 rep (its kernels compiled into the
# cache), and the interference probe BESIDE the other jobs' tests (the contention that
# session 15's converge run met; printed, not asserted).
D=${DATA:-/tmp/data}; R=bench/h200-2026-12-02-s16/conv
echo "== $(date -u +%T) start; cache ${MICROGPT_CACHE_DIR:-unset}"
nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader | wc -l
( MICROGPT_TEST_DEVICE=gpu timeout 150 python3 -m pytest tests/test_converge.py -x -q \
    -p no:cacheprovider > $OUT/pytest.log 2>&1; echo "pytest rc $?" >> $OUT/pytest.log ) &
( timeout 160 python3 tools/converge.py --config andrea-12m --data $D --tokenizer $D/tokenizer.json \
    --steps 4 --batch-size 64 --seeds 0 --eval-every 2 --curve-windows 64 --log-every 2 \
    --no-torch-compile --out $OUT/warm12m > $OUT/warm12m.log 2>&1; echo "converge rc $?" >> $OUT/warm12m.log ) &
( timeout 160 python3 $R/det_cost.py 1 1 > $OUT/det_warm.log 2>&1; echo "det_cost rc $?" >> $OUT/det_warm.log ) &
( timeout 160 python3 $R/interference.py $D 100 > $OUT/interference-beside-tests.log 2>&1;
  echo "interference rc $?" >> $OUT/interference-beside-tests.log ) &
wait
for f in pytest warm12m det_warm interference-beside-tests; do echo "== $f"; grep -v "NumbaPerformanceWarning\|warn(errors" $OUT/$f.log | tail -25; done
grep -q "pytest rc 0" $OUT/pytest.log && grep -q "converge rc 0" $OUT/warm12m.log
