"""What every kernel module shares: ceil_div, launch checks, and block-wide reductions.

The reductions use warp shuffles on a GPU. numba's CUDA simulator has no warp-level
functions, so under it (NUMBA_ENABLE_CUDASIM=1, read when numba starts) the same helpers
are a plain shared-memory twin with the same signature. Callers allocate
``cuda.shared.array(REDUCE_SCRATCH, float32)`` and every thread of the block must call.
"""
import math

import numpy as np
from numba import config, cuda, float32

SIMULATOR = bool(config.ENABLE_CUDASIM)
WARP = 32
# shared scratch a block reduction needs: one slot per warp, or one per thread in the twin
REDUCE_SCRATCH = 1024 if SIMULATOR else WARP


def ceil_div(a, b):
    return -(-a // b)


def check_array(name, arr, shape, dtype=np.float32):
    """A launcher's argument check: a contiguous device array of this shape and dtype."""
    if tuple(arr.shape) != tuple(shape):
        raise ValueError(f"{name}: expected shape {tuple(shape)}, got {tuple(arr.shape)}")
    if arr.dtype != np.dtype(dtype):
        raise TypeError(f"{name}: expected dtype {np.dtype(dtype)}, got {arr.dtype}")
    if not cuda.devicearray.is_cuda_ndarray(arr):
        raise TypeError(f"{name}: expected a device array, got {type(arr).__name__} "
                        "(copy it with numba.cuda.to_device first)")
    if not arr.is_c_contiguous():
        raise ValueError(f"{name}: expected a C-contiguous array, got a strided view "
                         "(the kernels are compiled for dense C-order arrays)")


def row_block(row_length, cap):
    """Threads for a block that walks rows of row_length elements: enough warps to give
    every thread a column, at most cap. A short row needs no idle warps (which would also
    cost the simulator ~2 ms each per thread)."""
    return min(cap, ceil_div(row_length, WARP) * WARP)


def check_block_size(block, multiple=1):
    """A launcher's block-size check: at most 1024 threads, a multiple of `multiple` (WARP
    for kernels that call block_sum / block_max, whose shuffles need whole warps)."""
    if not (0 < block <= 1024 and block % multiple == 0):
        raise ValueError(f"block size must be a multiple of {multiple} in [{multiple}, 1024], "
                         f"got {block}")


# ----------------------------------------------------------------------------------
# block reductions: warp shuffles on the GPU, a shared-memory twin in the simulator

@cuda.jit(device=True, inline=True)
def warp_sum(x):
    offset = WARP // 2
    while offset > 0:
        x += cuda.shfl_xor_sync(0xFFFFFFFF, x, offset)
        offset //= 2
    return x


@cuda.jit(device=True, inline=True)
def warp_max(x):
    offset = WARP // 2
    while offset > 0:
        x = max(x, cuda.shfl_xor_sync(0xFFFFFFFF, x, offset))
        offset //= 2
    return x


@cuda.jit(device=True, inline=True)
def _block_sum_shuffle(x, scratch):
    """Sum of x over the block (blockDim.x a multiple of 32), returned to every thread."""
    tid = cuda.threadIdx.x
    x = warp_sum(x)
    if tid % WARP == 0:
        scratch[tid // WARP] = x
    cuda.syncthreads()
    n_warps = cuda.blockDim.x // WARP
    x = scratch[tid % WARP] if tid % WARP < n_warps else float32(0.0)
    x = warp_sum(x)
    cuda.syncthreads()          # scratch may be reused by the next reduction
    return x


@cuda.jit(device=True, inline=True)
def _block_max_shuffle(x, scratch):
    tid = cuda.threadIdx.x
    x = warp_max(x)
    if tid % WARP == 0:
        scratch[tid // WARP] = x
    cuda.syncthreads()
    n_warps = cuda.blockDim.x // WARP
    x = scratch[tid % WARP] if tid % WARP < n_warps else float32(-math.inf)
    x = warp_max(x)
    cuda.syncthreads()
    return x


@cuda.jit(device=True)
def _block_sum_shared(x, scratch):
    tid = cuda.threadIdx.x
    scratch[tid] = x
    cuda.syncthreads()
    total = float32(0.0)
    for i in range(cuda.blockDim.x):
        total += scratch[i]
    cuda.syncthreads()
    return total


@cuda.jit(device=True)
def _block_max_shared(x, scratch):
    tid = cuda.threadIdx.x
    scratch[tid] = x
    cuda.syncthreads()
    best = float32(-math.inf)
    for i in range(cuda.blockDim.x):
        best = max(best, scratch[i])
    cuda.syncthreads()
    return best


block_sum = _block_sum_shared if SIMULATOR else _block_sum_shuffle
block_max = _block_max_shared if SIMULATOR else _block_max_shuffle
