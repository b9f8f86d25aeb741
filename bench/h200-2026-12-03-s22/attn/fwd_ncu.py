"""Session 22 (attn): the wgmma forward at one of time_attn.py's shapes, launched a few times
for ncu to profile one launch (the first ones load and compile).

ncu --clock-control none --kernel-name regex:hopper_attention_forward --launch-skip 2 \
    --launch-count 1 --set full -o REPORT python3 fwd_ncu.py SHAPE [TILE]
TILE: a HopperTile's fields, e.g. "3,128,3,1,1,1,0,1" (default: the default tile)."""
import os
import sys

import ml_dtypes
import numpy as np
from numba import cuda

from microgpt.kernels import cache
from microgpt.kernels.attention import hopper

SHAPES = {"120m": (16, 12, 1024, 64), "4096": (4, 12, 4096, 64), "d128": (8, 16, 2048, 128)}
if os.environ.get("MICROGPT_TEST_KERNEL_CACHE"):
    cache.use(os.environ["MICROGPT_TEST_KERNEL_CACHE"])
shape = SHAPES[sys.argv[1]]
if sys.argv[2:]:
    f = [int(x) for x in sys.argv[2].split(",")]
    tile = hopper.HopperTile(*f[:3], *map(bool, f[3:5]), f[5], *map(bool, f[6:]))
else:
    tile = hopper.default_tile(shape[3], shape[2])
rng = np.random.default_rng(0)
q, k, v = (cuda.to_device(rng.standard_normal(shape, np.float32).astype(ml_dtypes.bfloat16)
                          .view(np.uint16)) for _ in range(3))
out = cuda.device_array(shape, np.uint16)
lse = cuda.device_array(shape[:3], np.float32)
for _ in range(4):
    hopper.hopper_attention_forward(out, lse, q, k, v, tile=tile)
cuda.synchronize()
print("fwd_ncu", shape, tile, flush=True)
