#!/bin/bash
# issue 28: the GPT-2 XL row alone (torch.compile's compile there takes over 90 s; microgpt's
# kernels for it come from the steps job's cache only if that ran first), with microgpt's
# step also under --recompute gelu and all (the memory account: 48.2 / 43.5 / 41.1 GiB
# against torch.compile's ~42.8)
echo "tree at $(cat commit.txt)"
python3 tools/bench.py --only steps --bf16-only --steps-geometries gpt2-xl \
  --steps-runs ours_bf16_graph torch_compile --steps-recompute gelu all --reps 5 \
  --out $OUT/steps_xl.md 2>&1 | grep --line-buffered -v "Warning\|warn(" | tee $OUT/steps_xl.log | tail -3
