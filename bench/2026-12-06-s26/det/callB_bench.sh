#!/bin/bash
# session 26, call B (helper det, alone on the GPU; limit 90 s): --deterministic's cost at
# andrea-12m (B 64 x 256) and andrea-120m (B 16 x 1024), vocab 4,096, the shard's tokens,
# with session 26's changes and without them in the same process (det_ab.py: add_parts
# beside the stream or on it, the embedding's backward main's or session 24's; at
# andrea-120m also every ordered product by parts); then the
# embedding's backward alone at both batches (embed_ab.py: the atomics, session 24's,
# main's and its other chunks and part rows).
S=bench/2026-12-06-s26/det
echo "tree at $(cat commit.txt)"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
run() {   # name limit command...
  local name=$1 limit=$2; shift 2
  echo "VARIANTS=$VARIANTS $*" | tee $OUT/$name.log
  timeout -k 3 $limit "$@" 2>&1 | grep --line-buffered -v "Warning\|warn(" | tee -a $OUT/$name.log
  echo "rc ${PIPESTATUS[0]}" | tee -a $OUT/$name.log
}
# (at andrea-12m every ordered product goes by parts as routed)
export VARIANTS="default,deterministic,deterministic, add_parts on the stream,deterministic, session 24's embedding backward,deterministic as session 24 (both)"
run det_ab_12m 25 python3 $S/det_ab.py andrea-12m 64 256 20 5 4096 $DATA/train.bin
unset VARIANTS
run det_ab_120m 35 python3 $S/det_ab.py andrea-120m 16 1024 10 5 4096 $DATA/train.bin
run embed_ab_12m 10 python3 $S/embed_ab.py andrea-12m 64 256 4096 $DATA/train.bin
run embed_ab_120m 10 python3 $S/embed_ab.py andrea-120m 16 1024 4096 $DATA/train.bin
