#!/bin/bash
# s18-start (issue 29), on the GPU: the wgmma attention forward (copy_ahead no longer
# inlined by numba) against its float64 reference; beside it, the first runs that leave
# bench.sh its caches and manifests: andrea-120m on the default corpus and vocabulary
# (its tokens too), the GPT-2-XL geometry on the token shards. Each in a cache of its own,
# so that one's manifest does not add jobs to the other's compile-ahead.
set -u -o pipefail
T0=$(date +%s)
C1=/tmp/s18start-120m; C2=/tmp/s18start-xl
rm -rf $C1 $C2
find "$DATA" -maxdepth 2 > "$OUT/data.txt"
XL="--config andrea-120m --n-layer 48 --d-model 1600 --n-head 25 --vocab-size 4096 --batch-size 4 --data $DATA --tokenizer $DATA/tokenizer.json --steps 3"
(timeout -k 5 150 python3 tools/startup_time.py --runs cold --out "$OUT/firstruns.md" \
    --title "test.sh: andrea-120m, first run (beside the other jobs' tests)" -- \
    --config andrea-120m --steps 3 --cache-dir $C1 > "$OUT/first-120m.log" 2>&1
 echo "first run andrea-120m rc $? at $(( $(date +%s) - T0 )) s" | tee -a "$OUT/first-120m.log") &
(timeout -k 5 150 python3 tools/startup_time.py --runs cold --out "$OUT/firstruns-xl.md" \
    --title "test.sh: GPT-2-XL geometry, first run (beside the other jobs' tests)" -- \
    $XL --cache-dir $C2 > "$OUT/first-xl.log" 2>&1
 echo "first run XL rc $? at $(( $(date +%s) - T0 )) s" | tee -a "$OUT/first-xl.log") &
echo "=== GPU: the wgmma attention forward"
MICROGPT_TEST_DEVICE=gpu MICROGPT_GPU_EXAMPLES=4 timeout -k 5 140 python3 -m pytest -q -x -n 2 \
    -p no:cacheprovider tests/test_kernels_attention_hopper.py -k "hopper_attention_forward or persistent" \
    --durations=8 2>&1 | tee "$OUT/test_gpu.log"
rc=${PIPESTATUS[0]}
[ "$rc" = 0 ] || echo "FAIL: GPU tests of the wgmma forward (rc $rc)"
wait
tail -3 "$OUT/first-120m.log" "$OUT/first-xl.log"
echo "=== $(( $(date +%s) - T0 )) s; done"
exit $rc
