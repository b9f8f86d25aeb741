#!/bin/bash
# issue 31, proposed for call C (helper det, session 22): seed 2's pair of call A's
# converge_seeds.sh (whose PyTorch seed 2 its 330-s limit cut), alone on the GPU, every
# cache empty as there (both trainers' first runs, comparable with seed 1's row), so that
# the wall time to PyTorch's loss can be read on the mean of two seeds (seeds 1, 2).
# Estimated device time ~190 s (call A's seed 1: microgpt 37.0 s and PyTorch 65.9 s of
# training walls, the float32 evaluator's scoring of both, 21 curve points of 32 windows
# and the 846 windows of the whole split, with its first compile, the rest: the command
# ran 330 s for seed 1's pair, seed 2's microgpt and part of its PyTorch); limit 240 s.
C=/tmp/conv_empty
rm -rf $C && mkdir -p $C/microgpt $C/inductor $C/triton $C/cuda
export TORCHINDUCTOR_CACHE_DIR=$C/inductor TRITON_CACHE_DIR=$C/triton CUDA_CACHE_PATH=$C/cuda
timeout -k 5 ${CONV_S:-240} python3 tools/converge.py --config andrea-120m --vocab-size 4096 \
  --data "$DATA" --tokenizer "$DATA/tokenizer.json" --steps 1000 --batch-size 16 \
  --lr 6e-4 --warmup 50 --seeds 2 --eval-every 50 --curve-windows 32 --log-every 50 \
  --cache-dir $C/microgpt --out "$OUT/converge-120m-seed2" 2>&1 \
  | grep -v "Warning\|warn(" | tee "$OUT/converge_seed2.log"
echo "rc ${PIPESTATUS[0]}" >> "$OUT/converge_seed2.log"
