#!/bin/bash
# issue 28: GPT-2 medium kept / gelu / all recomputed, ten repetitions (torch.compile's row: the steps job's)
echo "tree at $(cat commit.txt)"; nvidia-smi --query-gpu=name,clocks.sm --format=csv,noheader
python3 tools/bench.py --only steps --bf16-only --steps-geometries gpt2-medium \
  --steps-runs ours_bf16_graph --steps-recompute gelu all --out $OUT/mem.md 2>&1 \
  | grep --line-buffered -v "Warning\|warn(" | tee $OUT/mem.log | tail -5
