#!/bin/bash
# session 24, call B (helper det, alone on the GPU; limit 90 s), on the embedding's host
# sort (4e25f3f) and add_parts in 16-byte groups (e571f41): andrea-12m's and
# andrea-120m's ops and captured steps, default / deterministic / deterministic with
# session 22's add_parts (det_profile.py), then each step's cost in more rounds
# (det_cost.py; at andrea-12m also the by-parts products in fewer splits: routings.py),
# the shard's tokens, vocab 4,096.
S=bench/h200-2026-12-04-s24/det
echo "tree at $(cat $S/commit.txt)" | tee $OUT/bench.log
run() {   # name limit command...
  local name=$1 limit=$2; shift 2
  echo "VARIANTS=$VARIANTS $*" | tee $OUT/$name.log
  timeout -k 3 $limit "$@" 2>&1 | grep -v "Warning\|warn(" | tee -a $OUT/$name.log
  echo "rc ${PIPESTATUS[0]}" | tee -a $OUT/$name.log
}
export VARIANTS="default,routed,routed with session 22's add_parts"
run det_profile_12m 25 python3 $S/det_profile.py andrea-12m 64 256 4096 3 $DATA/train.bin
run det_profile_120m 26 python3 $S/det_profile.py andrea-120m 16 1024 4096 3 $DATA/train.bin
export VARIANTS="default,deterministic,deterministic by parts in the fewest splits,deterministic by parts in half-way splits"
run det_cost_12m 20 python3 $S/det_cost.py andrea-12m 64 256 20 5 4096 $DATA/train.bin
export VARIANTS="default,deterministic"
run det_cost_120m 17 python3 $S/det_cost.py andrea-120m 16 1024 10 5 4096 $DATA/train.bin
