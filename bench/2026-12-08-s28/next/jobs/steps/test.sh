#!/bin/bash
# issue 28: warm microgpt's kernel cache and inductor's for bench.sh (main with the landed attention)
echo "tree at $(cat commit.txt)"
timeout 200 python3 tools/bench.py --only steps --bf16-only --steps-geometries andrea-12m andrea-120m \
  andrea-120m-t4096 gpt2-medium --steps-runs ours_bf16_graph torch_compile --reps 1 --out $OUT/warm.md 2>&1 \
  | grep --line-buffered -v "Warning\|warn(" | tee $OUT/warm.log | tail -3
