#!/bin/bash
# session 24, call A (helper det, alone on the GPU; limit 90 s): --deterministic's cost
# with the embedding's sort made on the host (4e25f3f) and every andrea-12m dW by parts (session 22's
# routing, never measured whole): andrea-12m's ops and captured step (det_profile.py),
# then andrea-120m's captured step (det_cost.py), the shard's tokens, vocab 4,096.
S=bench/h200-2026-12-04-s24/det
echo "tree at $(cat $S/commit.txt)" | tee $OUT/bench.log
export VARIANTS=default,routed
echo "VARIANTS=$VARIANTS python3 $S/det_profile.py andrea-12m 64 256 4096 3 \$DATA/train.bin" \
  | tee $OUT/det_profile_12m.log
timeout -k 3 48 python3 $S/det_profile.py andrea-12m 64 256 4096 3 $DATA/train.bin 2>&1 \
  | grep -v "Warning\|warn(" | tee -a $OUT/det_profile_12m.log
echo "rc ${PIPESTATUS[0]}" | tee -a $OUT/det_profile_12m.log
export VARIANTS=default,deterministic
echo "VARIANTS=$VARIANTS python3 $S/det_cost.py andrea-120m 16 1024 10 3 4096 \$DATA/train.bin" \
  | tee $OUT/det_cost_120m.log
timeout -k 3 36 python3 $S/det_cost.py andrea-120m 16 1024 10 3 4096 $DATA/train.bin 2>&1 \
  | grep -v "Warning\|warn(" | tee -a $OUT/det_cost_120m.log
echo "rc ${PIPESTATUS[0]}" | tee -a $OUT/det_cost_120m.log
