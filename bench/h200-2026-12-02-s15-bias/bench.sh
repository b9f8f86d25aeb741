#!/bin/bash
# bias (issue 32), the final figures: the step variants (plain and biased, one process) in
# main's 3c62b15 (before/) and in this tree, then micro.py in this tree (column sums, the
# biased GEMMs against the plain ones, the column sums' sweep), then the biased step's
# profile. The steps' kernels were compiled into the cache by test.sh.
J=$(cd "$(dirname "$0")" && pwd); C=bench/h200-2026-12-02/cached.py
T0=$(date +%s); stamp() { echo "=== $(( $(date +%s) - T0 )) s: $*" | tee -a $OUT/summary.log; }
stamp "step variants, before (3c62b15)"
(cd $J/before && PYTHONPATH=/tmp/site:$PWD timeout 28 python3 $C tools/step_variants.py --reps 10 --no-accum \
   --out $OUT/step_variants_before.md 2>&1 | grep -v -i warn | tail -n 6)
stamp "step variants, this tree ($(git rev-parse --short HEAD 2>/dev/null))"
timeout 28 python3 $C tools/step_variants.py --reps 10 --no-accum --out $OUT/step_variants_after.md 2>&1 | grep -v -i warn | tail -n 6
stamp "micro"
timeout 22 python3 $C $J/micro.py --gemm --sweep 2>&1 | grep -v -i warn | tee $OUT/micro.md
stamp "profile --bias, this tree"
timeout $(( 87 - $(date +%s) + T0 )) python3 $C tools/profile_step.py --config andrea-120m --bias --out $OUT/prof_bias_after.md 2>&1 | grep -v -i warn | head -n 8
stamp "done"
