"""Session 22 (attn): the wgmma forward at one of time_attn.py's shapes, launched a few times
for ncu to profile one launch (the first ones load and compile).

ncu --clock-control none --kernel-name regex:hopper_attention_forward --launch-skip 2 \
    --launch-count 1 --set full -o REPORT python3 fwd_ncu.py SHAPE"""
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
rng = np.random.default_rng(0)
q, k, v = (cuda.to_device(rng.standard_normal(shape, np.float32).astype(ml_dtypes.bfloat16)
                          .view(np.uint16)) for _ in range(3))
out = cuda.device_array(shape, np.uint16)
lse = cuda.device_array(shape[:3], np.float32)
for _ in range(4):
    hopper.hopper_attention_forward(out, lse, q, k, v)
cuda.synchronize()
print("fwd_ncu", shape, hopper.default_tile(shape[3]), flush=True)
