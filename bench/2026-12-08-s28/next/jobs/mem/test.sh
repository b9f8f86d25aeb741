#!/bin/bash
# issue 28: GPT-2 medium with GELU's output recomputed (--recompute gelu), warmed (one rep),
# beside the recompute modes' GPU test (the step against the kept one, bf16 and fp32)
echo "tree at $(cat commit.txt)"
(MICROGPT_TEST_DEVICE=gpu timeout 180 python3 -m pytest -q -p no:warnings -p no:cacheprovider \
   tests/test_cuda_model.py -k recomputing > $OUT/pytest_recompute.log 2>&1; echo "rc $?" >> $OUT/pytest_recompute.log) &
timeout 190 python3 tools/bench.py --only steps --bf16-only --steps-geometries gpt2-medium \
  --steps-runs ours_bf16_graph --steps-recompute gelu all --reps 1 --out $OUT/warm.md 2>&1 \
  | grep --line-buffered -v "Warning\|warn(" | tee $OUT/warm.log | tail -5
wait; tail -3 $OUT/pytest_recompute.log
