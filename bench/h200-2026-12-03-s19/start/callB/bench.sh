#!/bin/bash
# s19-start (issue 29), alone on the GPU (<= 50 s): the very first run of a shape on a
# machine ("fresh": a new cache directory, so it tokenizes too, and has no manifest and no
# kernels), its step recorded before the tokens are made and compiled meanwhile by the
# forked compilers; then ahead (the kernels removed, the manifest kept), warm twice; a
# fresh run whose compilers do not make CUDA and numba ready before the jobs come (A/B).
set -u
C1=/tmp/s19start-120m; C2=/tmp/s19start-120m-b
rm -rf $C1 $C2
timeout -k 2 31 python3 tools/startup_time.py --runs fresh ahead warm warm --out "$OUT/startup.md" \
    --title "andrea-120m, the default corpus and vocabulary" -- \
    --config andrea-120m --steps 3 --cache-dir $C1 2>&1 | tee "$OUT/startup-120m.log"
MICROGPT_S19_WARM_UP=0 timeout -k 2 14 python3 tools/startup_time.py --runs fresh --out "$OUT/startup.md" \
    --title "andrea-120m, compilers not made ready before the jobs" -- \
    --config andrea-120m --steps 3 --cache-dir $C2 2>&1 | tee "$OUT/startup-120m-nowarmup.log"
