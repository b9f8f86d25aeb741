#!/bin/bash
# mem, call B: memory and tokens/s of the step with the LM head in chunks of rows (two of
# 8192 at both sizes) and the arena (the chunk's logits in the memory of the blocks'
# scratch), against torch.compile in the same run; the raw rows (GiB unrounded) in bench.log
date -u > $OUT/bench_date.txt
timeout 115 python3 tools/bench.py --only steps --bf16-only --no-torch-compile --reps 10 \
  --steps-geometries andrea-120m andrea-12m --out $OUT/steps.md 2>&1 | tail -30 | tee $OUT/bench.log
