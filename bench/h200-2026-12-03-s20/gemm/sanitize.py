"""The copier and ping-pong tiles on ragged products (every epilogue, both layouts of b, a
bias), against float64 on the host: for compute-sanitizer's memcheck (small shapes).

compute-sanitizer --tool memcheck --error-exitcode 1 python3 sanitize.py
"""
import ml_dtypes
import numpy as np
from numba import cuda

from microgpt.kernels.gemm import bf16 as gemm_bf16, tuning

rng = np.random.default_rng(1)


def bf16(shape):
    x = rng.standard_normal(shape, np.float32).astype(ml_dtypes.bfloat16)
    return x, cuda.to_device(x.view(np.uint16)), x.astype(np.float64)


for tile in (tuning.COPIER_TILE, tuning.PINGPONG_TILE):
    for M, N, K, ta, tb, epilogue in ((1000, 1096, 904, False, False, "bf16"),
                                      (776, 392, 1032, False, True, "float32"),
                                      (392, 776, 2056, True, False, "accumulate")):
        _, da, a64 = bf16((K, M) if ta else (M, K))
        _, db, b64 = bf16((N, K) if tb else (K, N))
        expected = (a64.T if ta else a64) @ (b64.T if tb else b64)
        bias = None
        if epilogue == "bf16":
            bias_host = rng.standard_normal(N).astype(np.float32)
            bias = cuda.to_device(bias_host)
            expected = expected + bias_host
        out = cuda.to_device(np.zeros((M, N), np.uint16 if epilogue == "bf16" else np.float32))
        gemm_bf16.matmul_bf16(out, da, db, ta, tb, epilogue == "accumulate", bias, tile=tile)
        got = out.copy_to_host()
        if epilogue == "bf16":
            got = got.view(ml_dtypes.bfloat16)
        got = got.astype(np.float64)
        err = np.linalg.norm(got - expected) / np.linalg.norm(expected)
        print(f"{tuple(tile)} {M}x{N}x{K} ta {ta} tb {tb} {epilogue}: rel err {err:.2e}",
              flush=True)
        assert err < (2.0**-8 + 1e-5 if epilogue == "bf16" else 1e-5), err
print("sanitize: done")
