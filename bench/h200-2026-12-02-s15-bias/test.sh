#!/bin/bash
# bias (issue 32), call C: no tests (call B's passed); only the plain and biased steps
# compiled once in both trees (this one and main's 3c62b15 in before/), so that bench.sh
# finds their kernels in the cache.
J=$(cd "$(dirname "$0")" && pwd); C=bench/h200-2026-12-02/cached.py
[ -e $J/before/microgpt/kernels ] || ln -s ../kernels $J/before/microgpt/kernels
(timeout 160 python3 $C tools/step_variants.py --reps 1 --no-accum --out $OUT/warm.md \
   > $OUT/warm.log 2>&1; echo "warm rc $?" >> $OUT/warm.log) &
(cd $J/before && PYTHONPATH=/tmp/site:$PWD timeout 160 python3 $C tools/step_variants.py --reps 1 \
   --no-accum --out $OUT/warm_before.md > $OUT/warm_before.log 2>&1; echo "warm rc $?" >> $OUT/warm_before.log) &
wait
tail -n 3 $OUT/warm.log; tail -n 3 $OUT/warm_before.log
