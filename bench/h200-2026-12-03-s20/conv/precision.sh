# issue 31 (b): bf16 against fp32, 500 steps of andrea-120m geometry (vocab 4096), seed 0,
# both trainers at once (losses do not depend on timing), each scored on the whole split.
timeout -k 5 ${PREC_S:-430} python3 bench/h200-2026-12-02-s16/conv/precision.py 0 bf16,fp32 -- \
  --config andrea-120m --vocab-size 4096 --data "$DATA" --tokenizer "$DATA/tokenizer.json" \
  --steps 500 --batch-size 16 --lr 6e-4 --warmup 50 --eval-every 250 --curve-windows 32 \
  --log-every 50 2>&1 | grep -v "NumbaPerformanceWarning\|warn(" | tee "$OUT/precision.log"
