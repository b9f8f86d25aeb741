"""Session 24 (attn; from session 22's fwd_ncu.py): the wgmma forward, or the wgmma backward
(its dq pass then its dk/dv pass, after one forward), at one of ab.py's shapes, launched a
few times for ncu to profile one launch of each kernel (the first ones load and compile).

ncu --clock-control none --kernel-name regex:hopper_attention_forward --launch-skip 2 \
    --launch-count 1 --set full -o REPORT python3 attn_ncu.py SHAPE [TILE]
ncu --clock-control none --kernel-name regex:backward_dkdv --launch-skip 2 \
    --launch-count 1 --set full -o REPORT python3 attn_ncu.py SHAPE backward
(regex:backward_dq for the dq pass: one kernel a report, so that sass_mix.py reads one)
TILE: a HopperTile's fields, e.g. "3,128,3,1,1,1,0,1" (default: the default tile)."""
import os
import sys

import ml_dtypes
import numpy as np
from numba import cuda

from microgpt.kernels import cache
from microgpt.kernels.attention import hopper, hopper_backward

SHAPES = {"120m": (16, 12, 1024, 64), "4096": (4, 12, 4096, 64), "d128": (8, 16, 2048, 128)}
if os.environ.get("MICROGPT_TEST_KERNEL_CACHE"):
    cache.use(os.environ["MICROGPT_TEST_KERNEL_CACHE"])
shape = SHAPES[sys.argv[1]]
backward = "backward" in sys.argv[2:]
fields = [a for a in sys.argv[2:] if a != "backward"]
if fields:
    f = [int(x) for x in fields[0].split(",")]
    tile = hopper.HopperTile(*f[:3], *map(bool, f[3:5]), f[5], *map(bool, f[6:]))
else:
    tile = hopper.default_tile(shape[3], shape[2])
rng = np.random.default_rng(0)
q, k, v, dout = (cuda.to_device(rng.standard_normal(shape, np.float32)
                                .astype(ml_dtypes.bfloat16).view(np.uint16)) for _ in range(4))
out, dq, dk, dv = (cuda.device_array(shape, np.uint16) for _ in range(4))
lse, delta = (cuda.device_array(shape[:3], np.float32) for _ in range(2))
for _ in range(1 if backward else 4):
    hopper.hopper_attention_forward(out, lse, q, k, v, tile=tile)
for _ in range(4 if backward else 0):
    hopper_backward.hopper_attention_backward(dq, dk, dv, delta, dout, q, k, v, out, lse)
cuda.synchronize()
print("attn_ncu", shape, "backward" if backward else tile, flush=True)
