#!/bin/bash
# s18-start (issue 29), alone on the GPU: process start to the first step's line
# (tools/startup_time.py), on the caches and manifests that test.sh's first runs left.
# andrea-120m: compiling ahead (the kernels removed, the manifest kept: the 16 compilers
# forked at the start), then warm twice; the GPT-2-XL geometry warm twice; last the cold
# first run (every kernel compiled in its first step), which a timeout may cut.
set -u
C1=/tmp/s18start-120m; C2=/tmp/s18start-xl
XL="--config andrea-120m --n-layer 48 --d-model 1600 --n-head 25 --vocab-size 4096 --batch-size 4 --data $DATA --tokenizer $DATA/tokenizer.json --steps 3"
ls $C1/kernels/manifests $C2/kernels/manifests 2>&1 | tee "$OUT/manifests.txt"
timeout -k 3 30 python3 tools/startup_time.py --runs ahead warm warm --out "$OUT/startup.md" \
    --title "andrea-120m, the default corpus and vocabulary" -- \
    --config andrea-120m --steps 3 --cache-dir $C1 2>&1 | tee "$OUT/startup-120m.log"
timeout -k 3 25 python3 tools/startup_time.py --runs warm warm --out "$OUT/startup.md" \
    --title "GPT-2-XL geometry (48 x 1600, 25 heads), vocabulary 4096, token shards" -- \
    $XL --cache-dir $C2 2>&1 | tee "$OUT/startup-xl.log"
python3 - "$C1" "$C2" <<'PY' 2>&1 | tee "$OUT/compile_seconds.txt"
# each manifest's kernels by their recorded compile seconds (the longest set compile-ahead's time)
import sys
from pathlib import Path
from microgpt.kernels import cache
for directory in sys.argv[1:]:
    for path in sorted((Path(directory) / "kernels" / "manifests").glob("*.pkl")):
        _, entries = cache.read_manifest(path)
        print(path)
        for recipe, sig, name, seconds in sorted(entries, key=lambda e: -(e[3] or 0)):
            print(f"  {seconds or 0:6.2f} s  {name.rsplit('-', 1)[0]}  {recipe[2:4] if recipe[0] == 'factory' else ''}")
PY
timeout -k 3 50 python3 tools/startup_time.py --runs cold --out "$OUT/startup.md" \
    --title "andrea-120m, first run (no kernels, no manifest)" -- \
    --config andrea-120m --steps 3 --cache-dir $C1 2>&1 | tee "$OUT/startup-120m-cold.log"
