#!/bin/bash
# session 23, call B (lead, serial, ALONE on the GPU): issue 31's 3-seed pairs at andrea-120m,
# vocab 4096, the stdlib shards in $DATA, 1,000 steps of 16 x 1024, PyTorch under torch.compile,
# every cache empty at the command's start (microgpt's --cache-dir, inductor's, Triton's and the
# driver's JIT cache new): seed 0 is each trainer's first run, seeds 1 and 2 its later runs.
# converge.py writes OUT.md/.json/.png after every seed, so a cut keeps the finished seeds.
# Estimate: seed 0's pair ~190 s (session 22's seed 1), seeds 1, 2 ~150 s each; limit CONV_S.
C=/tmp/conv_empty
rm -rf $C && mkdir -p $C/microgpt $C/inductor $C/triton $C/cuda
export TORCHINDUCTOR_CACHE_DIR=$C/inductor TRITON_CACHE_DIR=$C/triton CUDA_CACHE_PATH=$C/cuda
echo "main at $(cat commit.txt 2>/dev/null)" > "$OUT/converge3.log"
timeout -k 5 ${CONV_S:-510} python3 tools/converge.py --config andrea-120m --vocab-size 4096 \
  --data "$DATA" --tokenizer "$DATA/tokenizer.json" --steps 1000 --batch-size 16 \
  --lr 6e-4 --warmup 50 --seeds 0 1 2 --eval-every 100 --curve-windows 32 --log-every 50 \
  --cache-dir $C/microgpt --out "$OUT/converge-120m-seeds012" 2>&1 \
  | grep -v "Warning\|warn(" | tee -a "$OUT/converge3.log"
echo "rc ${PIPESTATUS[0]}" >> "$OUT/converge3.log"
du -sh $C/microgpt/kernels $C/inductor $C/triton 2>/dev/null >> "$OUT/converge3.log"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv >> "$OUT/converge3.log"
