#!/bin/bash
# session 24, call A (helper det, beside the other helpers' tests; limit 140 s): two
# trainer runs of a seed with --deterministic at andrea-12m (200 steps, B 64 x 256, the
# shard's tokens; the embedding's host sort, every andrea-12m dW by parts), the
# checkpoints compared by cmp and sha256; beside them the embedding's GPU tests.
S=bench/h200-2026-12-04-s24/det
echo "tree at $(cat $S/commit.txt)" | tee $OUT/test.log
(export MICROGPT_TEST_DEVICE=gpu
 timeout -k 3 125 python3 -m pytest -v -p no:cacheprovider tests/test_kernels_embedding.py 2>&1 \
   | grep -v "Warning\|warn(" > $OUT/test_embedding.log
 echo "test_embedding rc ${PIPESTATUS[0]}" >> $OUT/test_embedding.log) &
(bash bench/h200-2026-12-03-s21/det/same_bits_runs.sh andrea-12m 64 200 62) &
wait
cat $OUT/samebits.txt >> $OUT/test.log; tail -3 $OUT/test_embedding.log >> $OUT/test.log
