# session 22, call A (lead, serial, alone on the GPU): issue 31 wall time to PyTorch loss
# issue 31, call C (prepared by helper det, session 21): wall time to the PyTorch trainer's
# 1,000-step loss at andrea-120m geometry, vocab 4096, the stdlib shards in $DATA, seeds 1
# and 2, PyTorch under torch.compile; every cache empty at the command's start:
#   microgpt's kernel (and token) cache: --cache-dir, a new empty directory (converge.py's
#     trainers, its evaluator and the compile-ahead processes all take it; the carried
#     MICROGPT_CACHE_DIR is not read when --cache-dir is given);
#   torch's: TORCHINDUCTOR_CACHE_DIR and TRITON_CACHE_DIR, new empty directories (inductor's
#     FX graph, autotuning and Triton kernel caches), read by PyTorch's trainer processes;
#   the driver's JIT cache (the persistent GEMMs' whole-program load): CUDA_CACHE_PATH, new.
# Seed 1 then runs as a user's first run of each trainer (everything compiled), seed 2 as
# the second (both find seed 1's compiled kernels), both trainers alike.
# OUT.md's table holds, per seed, "microgpt to PyTorch's loss, s" and "that / PyTorch wall"
# (the target: <= 0.7); the converge log repeats the table (the tee below).
# Estimated device time: ~240 s (seed 1: microgpt ~12 s start-up + 1,000 x 27-29 ms,
# PyTorch ~27 s start-up + 1,000 x 26.3 ms, both scored by the float32 evaluator, ~20 s
# with its first compile; seed 2 ~15 s less for each trainer's start-up); limit 330 s.
C=/tmp/conv_empty
rm -rf $C && mkdir -p $C/microgpt $C/inductor $C/triton $C/cuda
export TORCHINDUCTOR_CACHE_DIR=$C/inductor TRITON_CACHE_DIR=$C/triton CUDA_CACHE_PATH=$C/cuda
timeout -k 5 ${CONV_S:-330} python3 tools/converge.py --config andrea-120m --vocab-size 4096 \
  --data "$DATA" --tokenizer "$DATA/tokenizer.json" --steps 1000 --batch-size 16 \
  --lr 6e-4 --warmup 50 --seeds 1 2 --eval-every 50 --curve-windows 32 --log-every 50 \
  --cache-dir $C/microgpt --out "$OUT/converge-120m-seeds12" 2>&1 | tee "$OUT/converge_seeds.log"
echo "rc ${PIPESTATUS[0]}" >> "$OUT/converge_seeds.log"
du -sh $C/microgpt/kernels $C/inductor $C/triton 2>/dev/null >> "$OUT/converge_seeds.log"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv >> "$OUT/converge_seeds.log"
