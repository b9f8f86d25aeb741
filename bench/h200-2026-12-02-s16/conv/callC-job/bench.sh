#!/bin/bash
# conv (issue 31), call C, alone on the GPU: microgpt bf16 against fp32 at andrea-120m
# geometry (vocab 4096, B 16 x 1024, lr 6e-4), seed 0, both trainers at once, each final
# model on the whole validation split by converge's fp32 evaluator (bf16 scored while fp32
# still trains). The fp32 step is 697 ms (call B), so 500 steps (349 s) cannot fit: 200
# steps with 200 s, 80 steps if bench_seconds was cut below 190 (see NOTE).
D=${DATA:-/tmp/data}; R=bench/h200-2026-12-02-s16/conv
S=$(cat ../../jobs/conv/bench_seconds 2>/dev/null || echo 90)
STEPS=200; WARMUP=50; [ "$S" -lt 190 ] && { STEPS=80; WARMUP=20; }
echo "bench_seconds $S: $STEPS steps" | tee $OUT/plan.txt
nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv,noheader | tee -a $OUT/plan.txt
timeout $((S - 4)) python3 $R/precision.py 0 bf16,fp32 -- --config andrea-120m --vocab-size 4096 \
    --data $D --tokenizer $D/tokenizer.json --steps $STEPS --batch-size 16 --lr 6e-4 \
    --warmup $WARMUP --eval-every 100 --curve-windows 32 --log-every 25 2>&1 \
    | grep -v "NumbaPerformanceWarning\|warn(errors" | tee $OUT/precision-120m-$STEPS.log
