"""The persistent kernel's GELU epilogue (copier and ping-pong tiles) and its narrow copier
(split K as the launcher routes it) on ragged products, against float64 on the host: for
compute-sanitizer's memcheck (small shapes).

compute-sanitizer --tool memcheck --error-exitcode 1 python3 sanitize.py
"""
import ml_dtypes
import numpy as np
from numba import cuda

from microgpt import reference as ref
from microgpt.kernels.gemm import bf16 as gemm_bf16, tuning

rng = np.random.default_rng(1)


def bf16(shape):
    x = rng.standard_normal(shape, np.float32).astype(ml_dtypes.bfloat16)
    return cuda.to_device(x.view(np.uint16)), x.astype(np.float64)


def host(arr):
    return arr.copy_to_host().view(ml_dtypes.bfloat16).astype(np.float64)


for tile in (tuning.COPIER_TILE, tuning.PINGPONG_TILE):
    for M, N, K in ((1000, 1096, 904), (776, 392, 1032)):
        da, a64 = bf16((M, K))
        db, b64 = bf16((K, N))
        pre, out = (cuda.to_device(np.full((M, N), 0xFFFF, np.uint16)) for _ in range(2))
        gemm_bf16.matmul_bf16(out, da, db, gelu="forward", pre=pre, tile=tile)
        expected = a64 @ b64
        stored = host(pre)
        err_pre = np.linalg.norm(stored - expected) / np.linalg.norm(expected)
        want = ref.gelu_forward(stored)
        err = np.linalg.norm(host(out) - want) / np.linalg.norm(want)
        print(f"{tuple(tile)} {M}x{N}x{K} gelu: rel err pre {err_pre:.2e} out {err:.2e}",
              flush=True)
        assert err_pre < 2.0**-8 + 1e-5 and err < 2.0**-8 + 1e-5, (err_pre, err)
# the narrow copier as the launcher routes it (a split-K dW: split_slabs), its split
for M, N, K, ta, accumulate in ((1000, 392, 2056, False, False), (392, 776, 9000, True, True)):
    da, a64 = bf16((K, M) if ta else (M, K))
    db, b64 = bf16((K, N))
    out0 = rng.standard_normal((M, N)).astype(np.float32) if accumulate else None
    out = cuda.to_device(out0 if accumulate else np.full((M, N), np.nan, np.float32))
    gemm_bf16.matmul_bf16(out, da, db, ta, False, accumulate, tile=tuning.NARROW_COPIER_TILE)
    expected = (a64.T if ta else a64) @ b64 + (out0 if accumulate else 0.0)
    err = np.linalg.norm(out.copy_to_host() - expected) / np.linalg.norm(expected)
    print(f"narrow copier: {M}x{N}x{K} ta {ta} accumulate {accumulate}: rel err {err:.2e}",
          flush=True)
    assert err < 1e-5, err
print("sanitize: done")
