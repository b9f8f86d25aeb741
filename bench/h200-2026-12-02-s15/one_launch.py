"""One persistent launch (two tiles a block), checked against float64, for compute-sanitizer."""
import numpy as np, ml_dtypes
from numba import cuda
from microgpt.kernels import cache
cache.use("/tmp/tk")
from microgpt.kernels.gemm import bf16 as gemm_bf16, tuning
rng = np.random.default_rng(1)
M, N, K = 2048, 4096, 768              # 16 x 16 = 256 tiles over 132 blocks
a = rng.standard_normal((M, K)).astype(ml_dtypes.bfloat16)
b = rng.standard_normal((K, N)).astype(ml_dtypes.bfloat16)
exp = a.astype(np.float64) @ b.astype(np.float64)
for tile in (tuning.PERSISTENT_TILE, tuning.CLUSTER_TILE):
    out = cuda.to_device(np.full((M, N), 0x7fc0, np.uint16))
    gemm_bf16.matmul_bf16(out, cuda.to_device(a.view(np.uint16)),
                          cuda.to_device(b.view(np.uint16)), tile=tile)
    got = out.copy_to_host().view(ml_dtypes.bfloat16).astype(np.float64)
    err = np.linalg.norm(got - exp) / np.linalg.norm(exp)
    print(tile, "relative error", err, flush=True)
    assert err < 2.0**-8 + 1e-5, err

# a split K added into out, in clusters (the weight gradients' way)
w = rng.standard_normal((M, 256)).astype(ml_dtypes.bfloat16)
d_w = cuda.to_device(w.view(np.uint16))
exp = a.astype(np.float64).T @ w.astype(np.float64)
out0 = rng.standard_normal((K, 256)).astype(np.float32)
out = cuda.to_device(out0)
gemm_bf16.matmul_bf16(out, cuda.to_device(a.view(np.uint16)), d_w, True, False, True,
                      tile=tuning.CLUSTER_TILE, split_k=3)
err = np.linalg.norm(out.copy_to_host() - out0 - exp) / np.linalg.norm(exp)
print("clustered split-K relative error", err)
assert err < 1e-5, err
