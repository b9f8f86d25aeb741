#!/bin/bash
# s18-start (issue 29), call B: no GPU test this time (call A passed the wgmma forward's,
# and no kernel changed since); the first runs that leave bench.sh its caches and
# manifests, as in call A (andrea-120m on the default corpus and vocabulary, the GPT-2-XL
# geometry on the token shards, each in a cache of its own), and a first run of the
# attention benchmark to fill its kernel cache. All beside the other jobs' tests.
set -u
T0=$(date +%s)
C1=/tmp/s18start-120m; C2=/tmp/s18start-xl; C3=/tmp/s18start-attn
rm -rf $C1 $C2 $C3
XL="--config andrea-120m --n-layer 48 --d-model 1600 --n-head 25 --vocab-size 4096 --batch-size 4 --data $DATA --tokenizer $DATA/tokenizer.json --steps 3"
(timeout -k 5 155 python3 tools/startup_time.py --runs cold --out "$OUT/firstruns.md" \
    --title "test.sh: andrea-120m, first run (beside the other jobs' tests)" -- \
    --config andrea-120m --steps 3 --cache-dir $C1 > "$OUT/first-120m.log" 2>&1
 echo "first run andrea-120m rc $? at $(( $(date +%s) - T0 )) s" | tee -a "$OUT/first-120m.log") &
(timeout -k 5 155 python3 tools/startup_time.py --runs cold --out "$OUT/firstruns-xl.md" \
    --title "test.sh: GPT-2-XL geometry, first run (beside the other jobs' tests)" -- \
    $XL --cache-dir $C2 > "$OUT/first-xl.log" 2>&1
 echo "first run XL rc $? at $(( $(date +%s) - T0 )) s" | tee -a "$OUT/first-xl.log") &
(timeout -k 5 155 python3 bench/h200-2026-12-03-s18/start/attention_cached.py $C3 \
    "$OUT/attention-first.md" > "$OUT/attention-first.log" 2>&1
 echo "attention first rc $? at $(( $(date +%s) - T0 )) s" | tee -a "$OUT/attention-first.log") &
wait
tail -n 3 "$OUT/first-120m.log" "$OUT/first-xl.log" "$OUT/attention-first.log"
ls $C1/kernels/manifests $C2/kernels/manifests > /dev/null || { echo "FAIL: a first run left no manifest"; exit 1; }
echo "=== $(( $(date +%s) - T0 )) s; done"
