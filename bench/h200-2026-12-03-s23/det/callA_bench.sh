#!/bin/bash
# session 23, call A (helper det, alone on the GPU): --deterministic's cost before the
# embedding's host sort, the baseline for call C. The captured bf16 step, default against
# deterministic, on the shard's tokens (session 22's det_cost.py), at andrea-12m and
# andrea-120m; then andrea-12m's ops (det_profile.py: the embedding backward's own time).
S22=bench/h200-2026-12-03-s22/det
echo "tree at $(cat bench/h200-2026-12-03-s23/det/commit.txt 2>/dev/null)" > $OUT/bench.log
export VARIANTS=default,deterministic
timeout -k 3 40 python3 $S22/det_cost.py andrea-12m 64 256 20 3 4096 $DATA/train.bin 2>&1 \
  | grep -v "Warning\|warn(" | tee $OUT/det_cost_12m.log
echo "rc ${PIPESTATUS[0]}" | tee -a $OUT/det_cost_12m.log
timeout -k 3 45 python3 $S22/det_cost.py andrea-120m 16 1024 10 3 4096 $DATA/train.bin 2>&1 \
  | grep -v "Warning\|warn(" | tee $OUT/det_cost_120m.log
echo "rc ${PIPESTATUS[0]}" | tee -a $OUT/det_cost_120m.log
unset VARIANTS
timeout -k 3 30 python3 $S22/det_profile.py andrea-12m 64 256 4096 3 $DATA/train.bin 2>&1 \
  | grep -v "Warning\|warn(" | tee $OUT/det_profile_12m.log
echo "rc ${PIPESTATUS[0]}" | tee -a $OUT/det_profile_12m.log
cat $OUT/det_cost_12m.log $OUT/det_cost_120m.log >> $OUT/bench.log
