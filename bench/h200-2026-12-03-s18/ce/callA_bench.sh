#!/bin/bash
# s18-ce call A, alone on the GPU (kernels cached by test.sh): micro.py (the cross-entropy
# staged against read twice, AdamW in groups against main's, beside the copy), the
# andrea-120m bf16 step's profile, then ncu's DRAM figures of both bf16 cross-entropy kernels.
D=bench/h200-2026-12-03-s18/ce; C=bench/h200-2026-12-02/cached.py; J=$(dirname "$0")
T0=$(date +%s); stamp() { echo "=== $(( $(date +%s) - T0 )) s: $*" | tee -a $OUT/summary.log; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw --format=csv,noheader | tee $OUT/gpu.txt
stamp micro
timeout 36 python3 $C $D/micro.py copy bf16 adamw --adamw-main "$J/adamw_main.py" 2>&1 | tee "$OUT/micro.md"
stamp profile
timeout 22 python3 $C tools/profile_step.py --config andrea-120m --out $OUT/prof_step.md 2>&1 | tail -5
stamp "micro float32"
timeout 12 python3 $C $D/micro.py float32 2>&1 | tee "$OUT/micro_float32.md"
stamp ncu
cat > /tmp/ce_ncu.py <<'PY'
import numpy as np
from numba import cuda
from microgpt.kernels import crossentropy
N, V = 16384, 50304
rng = np.random.default_rng(0)
logits = cuda.to_device(np.resize(rng.integers(0x3f00, 0x4000, (64, V)).astype(np.uint16), (N, V)))
t = cuda.to_device(rng.integers(0, V, N).astype(np.int32)); l = cuda.device_array(N, np.float32)
for stage in (False, True, False, True):
    crossentropy.crossentropy_forward_backward(l, logits, t, 1.0 / N, stage=stage)
cuda.synchronize()
PY
timeout $(( 88 - $(date +%s) + T0 )) ncu --clock-control none --launch-skip 2 --metrics gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,dram__bytes.sum,sm__throughput.avg.pct_of_peak_sustained_elapsed,launch__registers_per_thread,sm__warps_active.avg.pct_of_peak_sustained_active \
    -k regex:crossentropy python3 $C /tmp/ce_ncu.py 2>&1 | tail -40 | tee "$OUT/ncu.log"
stamp done
