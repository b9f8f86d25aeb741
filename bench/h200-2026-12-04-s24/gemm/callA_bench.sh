#!/bin/bash
# session 24, call A, helper gemm's bench job (alone on the GPU; killed at 90 s): where the
# captured steps lose to torch.compile. torch.compile's step by kernel kind (torch_profile.py),
# microgpt's by op (tools/profile_step.py), andrea-12m first (the 2.0x target), then
# andrea-120m; the cross-entropy's and the LayerNorms' launch shapes at andrea-12m's
# widths (bw.py: the cross-entropy's threads a row, the LayerNorm backward's threads and
# rows a block) against a 1 GiB device copy.
D=bench/h200-2026-12-04-s24/gemm
clean() { grep -v "Warning\|warn(\|^$" ; }
{ echo "tree: $(cat $D/commit.txt)"; date -u; nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader; } | tee $OUT/bench.log
stamp() { echo "=== $SECONDS s: $*" | tee -a $OUT/bench.log; }
timeout -k 2 16 python3 tools/profile_step.py --config andrea-12m --batch-size 64 --seq-len 256 \
  --precision bf16 --out $OUT/profile_12m.md 2>&1 | clean > $OUT/profile_12m.log; stamp profile_12m
timeout -k 2 28 python3 $D/torch_profile.py --geometries andrea-12m andrea-120m --steps 5 \
  --out $OUT/torch_profile.md 2>&1 | clean > $OUT/torch_profile.log; stamp torch_profile
timeout -k 2 12 python3 bench/h200-2026-12-03-s23/mem/bw.py --geometries andrea-12m --only crossentropy layernorm_backward \
  residual_layernorm 2>&1 | clean > $OUT/bw_12m.md; stamp bw_12m
left=$((86 - SECONDS)); [ $left -gt 8 ] && timeout -k 2 $left python3 tools/profile_step.py \
  --config andrea-120m --batch-size 16 --seq-len 1024 --precision bf16 --out $OUT/profile_120m.md \
  2>&1 | clean > $OUT/profile_120m.log; stamp profile_120m
