#!/bin/bash
# session 26 call B (gemm, issue 28), alone on the GPU: the LM head's three products at
# 8,192 and 16,384 rows on the copier tiles (128 x 256, 128 x 192, 192 x 192) and a few splits beside torch.mm captured
# (head_sweep.py; andrea-120m, with its W_O and MLP down forwards, then andrea-12m's chunk), then the captured step with the
# head routed to the sweep's winners beside the default, and the head over all 16,384 rows
# (step_ab.py --whole: time and memory), in one process each; every other product of the
# andrea-120m step on the 192 x 192 tile beside its default; ncu of the head's dX and dW
# on the copier and the 192 x 192 tiles if time is left.
D=bench/2026-12-06-s26/gemm
clean() { grep --line-buffered -v "Warning\|warn(\|^$" ; }
{ echo "tree: $(cat commit.txt)"; date -u; nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader; } | tee $OUT/bench.log
stamp() { echo "=== $SECONDS s: $*" | tee -a $OUT/bench.log; }
timeout -k 2 40 python3 $D/head_sweep.py --configs andrea-120m --reps 5 --json $OUT/winners.json \
  --tiles copier narrow tall_copier --blocks 2>&1 | clean > $OUT/head_sweep_120m.md
stamp head_sweep 120m
timeout -k 2 35 python3 $D/step_ab.py --config andrea-120m --winners $OUT/winners.json --whole \
  --rounds 5 --steps 10 2>&1 | clean > $OUT/step_ab_120m.md; stamp step_ab 120m
left=$((86 - SECONDS)); [ $left -gt 14 ] && left=14; [ $left -gt 8 ] && timeout -k 2 $left python3 \
  $D/head_sweep.py --configs andrea-120m --rows 0 --step-products --tiles tall_copier --reps 5 \
  --json $OUT/winners_blocks_120m.json 2>&1 | clean > $OUT/tall_copier_120m.md; stamp tall_copier 120m
left=$((86 - SECONDS)); [ $left -gt 14 ] && left=14; [ $left -gt 8 ] && timeout -k 2 $left python3 $D/head_sweep.py \
  --configs andrea-12m --rows 8192 --reps 5 --json $OUT/winners_12m.json --tiles copier narrow tall_copier 2>&1 | clean \
  > $OUT/head_sweep_12m.md; stamp head_sweep 12m
left=$((88 - SECONDS)); [ $left -gt 25 ] && timeout -k 2 $left ncu --clock-control none \
  -k regex:persistent --section SpeedOfLight --section MemoryWorkloadAnalysis \
  --section WarpStateStats python3 $D/ncu_head.py --tiles copier tall_copier --products dX dW \
  2>&1 | clean > $OUT/ncu_head.log; stamp ncu
