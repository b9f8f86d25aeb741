"""The skinny bf16 products at MMA_UNROLL (argv[1]) k-blocks a warp loads at once, in a graph."""
import sys, warnings
sys.path.insert(0, "tools")     # run from the repository root
import numpy as np
from numba import cuda
from numba.core.errors import NumbaPerformanceWarning
warnings.simplefilter("ignore", NumbaPerformanceWarning)
from microgpt.kernels.gemm import skinny
u = int(sys.argv[1])
skinny.MMA_UNROLL, skinny._MMA_B_WORDS, skinny._MMA_A_WORDS = u, u * 4 * skinny.GROUP, u * 4
from benchmarks.timing import captured_time
from microgpt.cuda_backend import CudaBackend
from microgpt.data import default_cache_dir
from microgpt.kernels import cache as kernel_cache
kernel_cache.use(default_cache_dir() / "kernels")     # keyed on MMA_UNROLL's value too
ops = CudaBackend()
rng = np.random.default_rng(0)
bf = lambda *s: cuda.to_device((rng.standard_normal(s).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16))
f32 = lambda *s: cuda.to_device(rng.standard_normal(s).astype(np.float32))
for M in (1, 16):
    for K, N, outf in ((768, 2304, bf), (768, 768, f32), (768, 3072, bf), (3072, 768, f32), (384, 1152, bf), (384, 384, f32), (384, 1536, bf), (1536, 384, f32)):
        a, b, out = bf(M, K), bf(K, N), outf(M, N)
        want = (a.copy_to_host().astype(np.uint32) << 16).view(np.float32).astype(np.float64) @ (b.copy_to_host().astype(np.uint32) << 16).view(np.float32).astype(np.float64)
        tiles = -(-N // skinny.MMA_COLUMNS)
        for target in (tiles, 528):
            skinny.TARGET_BLOCKS = target
            us = 1e3 * captured_time(lambda stream: ops.matmul(out, a, b), 20, ops)
            got = out.copy_to_host()
            got = (got.astype(np.uint32) << 16).view(np.float32) if got.dtype == np.uint16 else got
            err = np.abs(got - want).max() / np.abs(want).max()
            print(f"unroll {u} M {M:2d} {K}x{N} target {target:3d}: {us:6.2f} us  (rel err {err:.1e})", flush=True)
        skinny.TARGET_BLOCKS = 528
