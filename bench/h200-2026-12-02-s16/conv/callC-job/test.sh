#!/bin/bash
# conv (issue 31), call C: the converge tests on the device, and andrea-120m's bf16 and
# fp32 steps (vocab 4096) compiled into the kernel cache for bench.sh (det_cost.py at one
# rep; quick where call B's cache came along).
R=bench/h200-2026-12-02-s16/conv
echo "== $(date -u +%T) start; cache ${MICROGPT_CACHE_DIR:-unset}"
( MICROGPT_TEST_DEVICE=gpu timeout 150 python3 -m pytest tests/test_converge.py -x -q \
    -p no:cacheprovider > $OUT/pytest.log 2>&1; echo "pytest rc $?" >> $OUT/pytest.log ) &
( timeout 160 python3 $R/det_cost.py 1 1 > $OUT/det_warm.log 2>&1; echo "det_cost rc $?" >> $OUT/det_warm.log ) &
wait
for f in pytest det_warm; do echo "== $f"; grep -v "NumbaPerformanceWarning\|warn(errors" $OUT/$f.log | tail -15; done
grep -q "pytest rc 0" $OUT/pytest.log
