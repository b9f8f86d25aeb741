#!/bin/bash
# s18-start (issue 29), call B, alone on the GPU: call A's start-up figures again
# (tools/startup_time.py on the caches and manifests of test.sh's first runs), and the
# attention benchmark on its warm kernel cache (the wgmma forward after copy_ahead was
# left for NVVM to inline). Each command has its own limit, the least needed last.
set -u
C1=/tmp/s18start-120m; C2=/tmp/s18start-xl; C3=/tmp/s18start-attn
XL="--config andrea-120m --n-layer 48 --d-model 1600 --n-head 25 --vocab-size 4096 --batch-size 4 --data $DATA --tokenizer $DATA/tokenizer.json --steps 3"
T0=$(date +%s)
timeout -k 3 28 python3 tools/startup_time.py --runs ahead warm warm --out "$OUT/startup.md" \
    --title "andrea-120m, the default corpus and vocabulary" -- \
    --config andrea-120m --steps 3 --cache-dir $C1 2>&1 | tee "$OUT/startup-120m.log"
echo "=== $(( $(date +%s) - T0 )) s"
timeout -k 3 40 python3 bench/h200-2026-12-03-s18/start/attention_cached.py $C3 \
    "$OUT/attention.md" 2>&1 | tee "$OUT/attention.log"
echo "=== $(( $(date +%s) - T0 )) s"
timeout -k 3 16 python3 tools/startup_time.py --runs warm --out "$OUT/startup.md" \
    --title "GPT-2-XL geometry (48 x 1600, 25 heads), vocabulary 4096, token shards" -- \
    $XL --cache-dir $C2 2>&1 | tee "$OUT/startup-xl.log"
echo "=== $(( $(date +%s) - T0 )) s"
