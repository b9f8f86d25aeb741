#!/bin/bash
# issue 28: the steps beside torch.compile, ten repetitions, one process (its log tee'd: a
# limit that cuts it keeps what it printed)
echo "tree at $(cat commit.txt)"; nvidia-smi --query-gpu=name,clocks.sm --format=csv,noheader
python3 tools/bench.py --only steps --bf16-only --steps-geometries andrea-12m andrea-120m \
  andrea-120m-t4096 gpt2-medium --steps-runs ours_bf16_graph torch_compile --out $OUT/steps.md 2>&1 \
  | grep --line-buffered -v "Warning\|warn(" | tee $OUT/steps.log | tail -3
