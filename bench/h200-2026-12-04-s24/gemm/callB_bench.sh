#!/bin/bash
# session 24, call B, helper gemm's bench job (alone on the GPU; killed at 90 s): the steps
# after the cross-entropy's launch (a warp a row at V 4096) beside torch.compile in the same
# process (tools/profile_step.py --torch-compile), andrea-12m then andrea-120m; between them
# every step GEMM and the LM head over the whole batch against torch.mm captured
# (gemm_head.py), and the cross-entropy's launch at andrea-120m's vocabulary (bw.py: the
# new default's 416 threads against 512 and the rest).
D=bench/h200-2026-12-04-s24/gemm
clean() { grep --line-buffered -v "Warning\|warn(\|^$" ; }
{ echo "tree: $(cat $D/commit.txt)"; date -u; nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader; } | tee $OUT/bench.log
stamp() { echo "=== $SECONDS s: $*" | tee -a $OUT/bench.log; }
timeout -k 2 24 python3 tools/profile_step.py --config andrea-12m --batch-size 64 --seq-len 256 \
  --precision bf16 --torch-compile --out $OUT/profile_12m.md 2>&1 | clean > $OUT/profile_12m.log
stamp profile_12m
timeout -k 2 22 python3 $D/gemm_head.py --configs andrea-120m andrea-12m --reps 5 2>&1 | clean \
  > $OUT/gemm_head.md; stamp gemm_head
timeout -k 2 8 python3 bench/h200-2026-12-03-s23/mem/bw.py --geometries andrea-120m --only crossentropy 2>&1 | clean \
  > $OUT/bw_120m.md; stamp bw_120m
left=$((87 - SECONDS)); [ $left -gt 8 ] && timeout -k 2 $left python3 tools/profile_step.py \
  --config andrea-120m --batch-size 16 --seq-len 1024 --precision bf16 --torch-compile \
  --out $OUT/profile_120m.md 2>&1 | clean > $OUT/profile_120m.log; stamp profile_120m
