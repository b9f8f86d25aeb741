#!/bin/bash
# s20-decode call A: the generate bench's cases at MMA_UNROLL 6, 2, 4, 3 (one process);
# the step's op profile at 6 (andrea-120m:1); each skinny product at 2 and 6
export PYTHONUNBUFFERED=1
D=bench/h200-2026-12-03-s20/decode
F="NumbaPerformanceWarning\|warn(errors"
T0=$(date +%s)
left() { echo $(( $1 - $(date +%s) + T0 )); }
timeout 50 python3 $D/unroll_sweep.py "$OUT/sweep.md" 2>&1 | grep -v "$F" | tee "$OUT/sweep.log"
echo "sweep rc ${PIPESTATUS[0]} at $(( $(date +%s) - T0 )) s" | tee -a "$OUT/sweep.log"
[ "$(left 66)" -gt 3 ] && timeout "$(left 66)" python3 -c "
import runpy, sys
sys.path.insert(0, 'tools')
from microgpt.kernels.gemm import skinny
skinny.MMA_UNROLL = 6
sys.argv = ['tools/profile_decode.py', '--cases', 'andrea-120m:1', '--out', '$OUT/profile6_120m_b1.md']
runpy.run_path('tools/profile_decode.py', run_name='__main__')" 2>&1 | grep -v "$F" > "$OUT/profile6.log"
echo "profile rc at $(( $(date +%s) - T0 )) s" | tee -a "$OUT/sweep.log"
[ "$(left 78)" -gt 3 ] && timeout "$(left 78)" python3 $D/skinny_probe.py 2 6 2>&1 | grep -v "$F" \
    | tee "$OUT/skinny_probe.log"
echo "done at $(( $(date +%s) - T0 )) s"
