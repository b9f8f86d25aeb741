"""A small run of the wgmma forward and backward (default tiles; D 64 and 128, ragged T)
for compute-sanitizer, out and lse checked against the mma.sync forward's, dq, dk, dv
against the mma.sync backward's.

python3 sanitize.py [D ...]"""
import sys

import ml_dtypes
import numpy as np
from numba import cuda

from microgpt.kernels.attention import flash as fa, hopper
from microgpt.kernels.attention import hopper_backward as hb

SHAPES = {64: (1, 2, 300, 64), 128: (1, 2, 200, 128)}
for D in map(int, sys.argv[1:] or ["64", "128"]):
    shape = SHAPES[D]
    rng = np.random.default_rng(1)
    q, k, v, dout = (cuda.to_device(rng.standard_normal(shape, np.float32)
                                    .astype(ml_dtypes.bfloat16).view(np.uint16)) for _ in range(4))
    out, dq, dk, dv = (cuda.device_array(shape, np.uint16) for _ in range(4))
    lse, delta = (cuda.device_array(shape[:3], np.float32) for _ in range(2))
    fa.flash_attention_forward(out, lse, q, k, v)
    want = [out.copy_to_host().view(ml_dtypes.bfloat16).astype(np.float64), lse.copy_to_host()]
    out2, lse2 = cuda.device_array_like(out), cuda.device_array_like(lse)
    hopper.hopper_attention_forward(out2, lse2, q, k, v)
    got = [out2.copy_to_host().view(ml_dtypes.bfloat16).astype(np.float64), lse2.copy_to_host()]
    print(shape, "out, lse against mma.sync's:",
          [float(np.linalg.norm(g - w) / np.linalg.norm(w)) for g, w in zip(got, want)])
    a = (dq, dk, dv, delta, dout, q, k, v, out, lse)
    fa.flash_attention_backward(*a)
    want = [x.copy_to_host().view(ml_dtypes.bfloat16).astype(np.float64) for x in (dq, dk, dv)]
    # the default tiles, and at D 64 a producer warp's dq pass
    for tiles in [(None, None)] + ([(hb.BackwardTile(2, 64, 4, 1, True), None)] if D == 64
                                   else []):
        hb.hopper_attention_backward(*a, tiles=tiles)
        cuda.synchronize()
        got = [x.copy_to_host().view(ml_dtypes.bfloat16).astype(np.float64) for x in (dq, dk, dv)]
        print(shape, tiles, "dq, dk, dv against mma.sync's:",
              [float(np.linalg.norm(g - w) / np.linalg.norm(w)) for g, w in zip(got, want)])
