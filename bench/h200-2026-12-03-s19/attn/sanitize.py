"""A small run of the wgmma backward (default tiles, D 64 and 128, ragged T) for
compute-sanitizer, its gradients checked against the mma.sync backward's."""
import ml_dtypes
import numpy as np
from numba import cuda

from microgpt.kernels.attention import flash as fa
from microgpt.kernels.attention import hopper_backward as hb

import sys

for shape in ((1, 2, 300, 64), (1, 2, 200, 128))[:int(sys.argv[1]) if len(sys.argv) > 1 else 2]:
    rng = np.random.default_rng(1)
    q, k, v, dout = (cuda.to_device(rng.standard_normal(shape, np.float32)
                                    .astype(ml_dtypes.bfloat16).view(np.uint16)) for _ in range(4))
    out, dq, dk, dv = (cuda.device_array(shape, np.uint16) for _ in range(4))
    lse, delta = (cuda.device_array(shape[:3], np.float32) for _ in range(2))
    fa.flash_attention_forward(out, lse, q, k, v)
    a = (dq, dk, dv, delta, dout, q, k, v, out, lse)
    fa.flash_attention_backward(*a)
    want = [x.copy_to_host().view(ml_dtypes.bfloat16).astype(np.float64) for x in (dk, dv)]
    hb.hopper_attention_backward(*a)
    got = [x.copy_to_host().view(ml_dtypes.bfloat16).astype(np.float64) for x in (dk, dv)]
    print(shape, [float(np.linalg.norm(g - w) / np.linalg.norm(w)) for g, w in zip(got, want)])
