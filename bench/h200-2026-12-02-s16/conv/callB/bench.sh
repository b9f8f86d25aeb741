#!/bin/bash
# conv (issue 31), call B, alone on the GPU (kernels cached by test.sh):
# 1. converge at andrea-12m, 2 seeds, each trainer and seed in a process of its own: the
#    step times per seed (microgpt's and PyTorch's "ms a step") should not drift;
# 2. --deterministic's cost at andrea-120m (vocab 4096 and 50304), and the fp32 step;
# 3. the interference probe alone: does a model trained after another in one process step
#    slower when nothing else is on the GPU?
D=${DATA:-/tmp/data}; R=bench/h200-2026-12-02-s16/conv
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw --format=csv,noheader | tee $OUT/gpu.txt
timeout 38 python3 tools/converge.py --config andrea-12m --data $D --tokenizer $D/tokenizer.json \
    --steps 200 --batch-size 64 --lr 1e-3 --warmup 50 --seeds 0 1 --eval-every 100 \
    --curve-windows 64 --log-every 25 --no-torch-compile --out $OUT/conv12m-200 2>&1 \
    | grep -v "NumbaPerformanceWarning\|warn(errors" | tee $OUT/conv12m-200.log
timeout 30 python3 $R/det_cost.py 15 3 2>&1 | grep -v "NumbaPerformanceWarning\|warn(errors" | tee $OUT/det_cost.log
timeout 20 python3 $R/interference.py $D 100 2>&1 | grep -v "NumbaPerformanceWarning\|warn(errors" | tee $OUT/interference-alone.log
