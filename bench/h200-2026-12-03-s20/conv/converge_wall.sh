# issue 31 (c): wall time to the PyTorch trainer's 1,000-step loss, torch.compile on,
# andrea-120m geometry, vocab 4096, the stdlib shards; microgpt's kernel cache as carried.
SEEDS=${SEEDS:-0}
timeout -k 5 ${CONV_S:-225} python3 tools/converge.py --config andrea-120m --vocab-size 4096 \
  --data "$DATA" --tokenizer "$DATA/tokenizer.json" --steps 1000 --batch-size 16 \
  --lr 6e-4 --warmup 50 --seeds $SEEDS --eval-every 50 --curve-windows 32 --log-every 50 \
  --out "$OUT/converge-120m-compile" 2>&1 | tee "$OUT/converge.log"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv >> "$OUT/converge.log"
