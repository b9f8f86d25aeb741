#!/bin/bash
# s20-decode call B: the generate bench's cases at MMA_UNROLL 2, 1, 3, 6 with the decoding
# step's LayerNorms fused into its products and not (one process, the step times
# interleaved); the sampler's launches (top-k's counts per lane); then the step's op
# profile at 3, fused (andrea-120m:1)
export PYTHONUNBUFFERED=1
D=bench/h200-2026-12-03-s20/decode
F="NumbaPerformanceWarning\|warn(errors"
T0=$(date +%s)
left() { echo $(( $1 - $(date +%s) + T0 )); }
timeout 36 python3 $D/variant_sweep.py "$OUT/sweep.md" 2>&1 | grep -v "$F" | tee "$OUT/sweep.log"
echo "sweep rc ${PIPESTATUS[0]} at $(( $(date +%s) - T0 )) s" | tee -a "$OUT/sweep.log"
[ "$(left 42)" -gt 3 ] && timeout "$(left 42)" python3 bench/h200-2026-12-03-s19/decode/sampler_probe.py \
    2>&1 | grep -v "$F" | tee "$OUT/sampler_probe.log"
[ "$(left 49)" -gt 4 ] && timeout "$(left 49)" python3 -c "
import runpy, sys
sys.path.insert(0, 'tools')
from microgpt import generate
from microgpt.kernels.gemm import skinny
skinny.MMA_UNROLL, generate.FUSE_NORMS = 3, True
sys.argv = ['tools/profile_decode.py', '--cases', 'andrea-120m:1', '--out', '$OUT/profile3f_120m_b1.md']
runpy.run_path('tools/profile_decode.py', run_name='__main__')" 2>&1 | grep -v "$F" > "$OUT/profile3f.log"
echo "done at $(( $(date +%s) - T0 )) s" | tee -a "$OUT/sweep.log"
