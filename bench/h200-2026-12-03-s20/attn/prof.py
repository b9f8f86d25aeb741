"""A profile target (session 19's, reused): one launch of each attention kernel at a shape, for ncu.

python3 prof.py SHAPE KINDS...   SHAPE: 120m | 4096 | d128; KINDS among hopper, flash, bwd, hbwd
Each kind runs twice (the first compiles and makes tensor maps); ncu takes the second via
--launch-skip. Also writes the SASS of each kernel launched (inspect_sass) into $OUT.
"""
import os
import sys

import ml_dtypes
import numpy as np
from numba import cuda

from microgpt.kernels.attention import flash as fa, hopper

SHAPES = {"120m": (16, 12, 1024, 64), "4096": (4, 12, 4096, 64), "d128": (8, 16, 2048, 128)}
B, H, T, D = SHAPES[sys.argv[1]]
kinds = sys.argv[2:]
rng = np.random.default_rng(0)
q, k, v, dout = (cuda.to_device(rng.standard_normal((B, H, T, D), np.float32)
                                .astype(ml_dtypes.bfloat16).view(np.uint16)) for _ in range(4))
out, dq, dk, dv = (cuda.device_array((B, H, T, D), np.uint16) for _ in range(4))
lse, delta = (cuda.device_array((B, H, T), np.float32) for _ in range(2))
hopper.hopper_attention_forward(out, lse, q, k, v)
cuda.synchronize()


def run(kind):
    if kind == "hopper":
        hopper.hopper_attention_forward(out, lse, q, k, v)
    elif kind == "flash":
        fa.flash_attention_forward(out, lse, q, k, v)
    elif kind == "bwd":
        fa.flash_attention_backward(dq, dk, dv, delta, dout, q, k, v, out, lse)
    elif kind == "hbwd":
        from microgpt.kernels.attention import hopper_backward as hb
        hb.hopper_attention_backward(dq, dk, dv, delta, dout, q, k, v, out, lse)


for kind in kinds:
    run(kind)
cuda.synchronize()
hopper.hopper_attention_forward(out, lse, q, k, v)   # out, lse of the forward again
cuda.synchronize()
for kind in kinds:
    run(kind)
cuda.synchronize()
if os.environ.get("SASS_DIR"):
    import microgpt.kernels.attention as attn_pkg
    dispatchers = [hopper.forward_kernel(D, hopper.default_tile(D)),
                   fa._forward_kernel(D, fa.default_tile(D, "forward")),
                   fa._dq_kernel(D, fa.default_tile(D, "dq")),
                   fa._dkdv_kernel(D, fa.default_tile(D, "dkdv"))]
    try:
        from microgpt.kernels.attention import hopper_backward as hb
        dispatchers += [hb.dq_kernel(D, hb.default_tile(D, 'dq')),
                        hb.dkdv_kernel(D, hb.default_tile(D, 'dkdv'))]
    except Exception as e:
        print("no hopper_backward:", e)
    for d in dispatchers:
        for sig, kern in d.overloads.items():
            name = d.__name__ if hasattr(d, "__name__") else d.py_func.__name__
            try:
                sass = kern.inspect_sass()
            except Exception as e:
                sass = f"inspect_sass failed: {e}"
            with open(os.path.join(os.environ["SASS_DIR"], f"{name}_D{D}.sass"), "w") as f:
                f.write(sass)
print("done", kinds)
