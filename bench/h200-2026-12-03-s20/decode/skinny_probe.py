"""Each skinny bf16 product of andrea-120m's and andrea-12m's decoding step at 1 and 16
rows, in a graph (20 back to back), at each MMA_UNROLL of argv[1:], with its error
against the float64 product. Run from the repository root."""
import sys
import warnings

sys.path.insert(0, "tools")
import numpy as np                                                      # noqa: E402
from numba import cuda                                                  # noqa: E402
from numba.core.errors import NumbaPerformanceWarning                   # noqa: E402

from benchmarks.timing import captured_time                             # noqa: E402
from microgpt.cuda_backend import CudaBackend                           # noqa: E402
from microgpt.data import default_cache_dir                             # noqa: E402
from microgpt.kernels import cache as kernel_cache                      # noqa: E402
from microgpt.kernels.gemm import skinny                                # noqa: E402

warnings.simplefilter("ignore", NumbaPerformanceWarning)
kernel_cache.use(default_cache_dir() / "kernels")
ops = CudaBackend()
rng = np.random.default_rng(0)


def bf(*shape):
    x = rng.standard_normal(shape).astype(np.float32)
    return cuda.to_device((x.view(np.uint32) >> 16).astype(np.uint16))


def f32(*shape):
    return cuda.to_device(rng.standard_normal(shape).astype(np.float32))


def values(x):
    x = x.copy_to_host()
    return (x.astype(np.uint32) << 16).view(np.float32) if x.dtype == np.uint16 else x


PRODUCTS = ((768, 2304, bf), (768, 768, f32), (768, 3072, bf), (3072, 768, f32),
            (384, 1152, bf), (384, 384, f32), (384, 1536, bf), (1536, 384, f32))
for unroll in map(int, sys.argv[1:]):
    skinny.MMA_UNROLL = unroll
    for M in (1, 16):
        for K, N, out_type in PRODUCTS:
            a, b, out = bf(M, K), bf(K, N), out_type(M, N)
            want = values(a).astype(np.float64) @ values(b).astype(np.float64)
            us = 1e3 * captured_time(lambda stream: ops.matmul(out, a, b), 20, ops)
            err = np.abs(values(out) - want).max() / np.abs(want).max()
            print(f"unroll {unroll} M {M:2d} {K:4d}x{N:4d}: {us:6.2f} us  (rel err {err:.1e})",
                  flush=True)
