"""What every kernel module shares: ceil_div, launch checks, and block-wide reductions.

The reductions use warp shuffles on a GPU. numba's CUDA simulator has no warp-level
functions, so under it (NUMBA_ENABLE_CUDASIM=1, read when numba starts) the same helpers
are a plain shared-memory twin with the same signature. Callers allocate
``cuda.shared.array(REDUCE_SCRATCH, float32)`` and every thread of the block must call,
the same number of times: ``warp_sum`` (a sum over each warp, for kernels that give a row
to a warp) too, since its twin synchronises the whole block.

Empty inputs, one rule for every launcher: the arguments are checked as always, then an
empty batch (no rows, B = 0, T = 0, n = 0) launches nothing (a CUDA grid cannot be 0 wide)
and leaves every output as it was, which is also the exact result for the outputs that
accumulate. Two kinds of empty axis have a result that must be written: a sum over
nothing is 0 (reductions.sum_to) and a product over K = 0 is a zero matrix (gemm.matmul).
An empty axis that a result is normalised over (LayerNorm's C, cross-entropy's V,
attention's head_dim D) has no result and raises ValueError (``check_not_empty``).
"""

import weakref

import numpy as np
from numba import cuda

from .device import MAX_THREADS, SIMULATOR, WARP

# shared scratch a block reduction needs: one slot per warp, or one per thread in the twin
REDUCE_SCRATCH = MAX_THREADS if SIMULATOR else WARP


def ceil_div(a, b):
    return -(-a // b)


def check_array(name, arr, shape, dtype=np.float32, strided=False):
    """A launcher's argument check: a device array of this shape and dtype, C-contiguous
    unless the kernel takes strided views (then its launcher checks the strides)."""
    if tuple(arr.shape) != tuple(shape):
        raise ValueError(f"{name}: expected shape {tuple(shape)}, got {tuple(arr.shape)}")
    if arr.dtype != np.dtype(dtype):
        raise TypeError(f"{name}: expected dtype {np.dtype(dtype)}, got {arr.dtype}")
    if not cuda.devicearray.is_cuda_ndarray(arr):
        raise TypeError(f"{name}: expected a device array, got {type(arr).__name__} "
                        "(copy it with numba.cuda.to_device first)")
    if not strided and not arr.is_c_contiguous():
        raise ValueError(f"{name}: expected a C-contiguous array, got a strided view "
                         "(the kernels are compiled for dense C-order arrays)")


def device_address(arr):
    """The address of a device array's first element (0 for an empty one): what an access
    wider than an element must be aligned to. The simulator's arrays are host memory."""
    if SIMULATOR:
        return arr.ctypes.data
    return arr.device_ctypes_pointer.value or 0


# id(allocation) -> {key: object}: what kept_with made for the arrays of each allocation
# alive (an entry goes when its allocation is collected, before the id can be reused)
_kept = {}


def _allocation(arr):
    """The object that owns arr's memory and frees it when it goes: numba's allocation
    (a view's is its base's); in the simulator, the NumPy array that owns the data."""
    if SIMULATOR:
        data = getattr(arr, "_ary", arr)
        return data if data.base is None else data.base
    return arr.gpu_data.owner


def kept_with(arr, key, make):
    """make(), called once per key for arr's allocation and kept as long as that memory
    lives, neither less nor more: what a launch made for an array and a captured graph
    holds the address of (a tensor map, a reduction's scratch)."""
    owner = _allocation(arr)
    if id(owner) not in _kept:
        _kept[id(owner)] = {}
        weakref.finalize(owner, _kept.pop, id(owner))
    kept = _kept[id(owner)]
    if key not in kept:
        kept[key] = make()
    return kept[key]


def fill_zero(arr, stream=0):
    """Zeros into a contiguous device array, in stream order (a memset, which a CUDA graph
    captures; the simulator has no driver memset: a copy of host zeros)."""
    if SIMULATOR:
        arr.copy_to_device(np.zeros(arr.shape, arr.dtype), stream=stream)
    else:
        from numba.cuda.cudadrv import driver
        driver.device_memset(arr, 0, arr.nbytes, stream=stream)


def check_not_empty(name, length):
    """A launcher's check that an axis it normalises over is not empty."""
    if length < 1:
        raise ValueError(f"{name} must be at least 1, got {length}: nothing to normalise over")


def row_block(row_length, cap):
    """Threads for a block that walks rows of row_length elements: enough warps to give
    every thread a column, at most cap. A short row needs no idle warps (which would also
    cost the simulator ~2 ms each per thread); an empty row still gets one, a valid block."""
    return min(cap, max(1, ceil_div(row_length, WARP)) * WARP)


def check_block_size(block, multiple=1):
    """A launcher's block-size check: at most MAX_THREADS (1024) threads, a multiple of
    `multiple` (WARP for kernels that call block_sum / block_max, whose shuffles need whole
    warps)."""
    if not (0 < block <= MAX_THREADS and block % multiple == 0):
        raise ValueError(f"block size must be a multiple of {multiple} in [{multiple}, "
                         f"{MAX_THREADS}], got {block}")


# ----------------------------------------------------------------------------------
# block reductions: warp shuffles on the GPU, a shared-memory twin in the simulator

@cuda.jit(device=True, inline=True)
def _add(a, b):
    return a + b


@cuda.jit(device=True, inline=True)
def _max(a, b):
    return max(a, b)


def _warp_reduction(combine):
    """combine(x) over the warp by shuffles (butterfly: every lane gets the result)."""
    @cuda.jit(device=True, inline=True)
    def warp_reduce(x):
        offset = WARP // 2
        while offset > 0:
            x = combine(x, cuda.shfl_xor_sync(0xFFFFFFFF, x, offset))
            offset //= 2
        return x
    return warp_reduce


def shuffle_reduction(combine, identity):
    """combine(x) over the block by warp shuffles (blockDim.x a multiple of 32), the result
    returned to every thread; scratch holds one value per warp."""
    warp_reduce = _warp_reduction(combine)

    @cuda.jit(device=True, inline=True)
    def block_reduce(x, scratch):
        tid = cuda.threadIdx.x
        x = warp_reduce(x)
        if tid % WARP == 0:
            scratch[tid // WARP] = x
        cuda.syncthreads()
        x = scratch[tid % WARP] if tid % WARP < cuda.blockDim.x // WARP else identity
        x = warp_reduce(x)
        cuda.syncthreads()          # scratch may be reused by the next reduction
        return x
    return block_reduce


def shared_reduction(combine, identity):
    """The simulator-safe twin: every thread posts x to scratch (one slot per thread),
    thread 0 combines the slots in order into slot 0, and every thread reads it back. One
    fold per block: a fold by every thread costs the simulator threads^2 device calls,
    most of its test time at 512 threads."""
    @cuda.jit(device=True)
    def block_reduce(x, scratch):
        tid = cuda.threadIdx.x
        scratch[tid] = x
        cuda.syncthreads()
        if tid == 0:
            total = identity
            for i in range(cuda.blockDim.x):
                total = combine(total, scratch[i])
            scratch[0] = total
        cuda.syncthreads()
        result = scratch[0]
        cuda.syncthreads()          # scratch may be reused by the next reduction
        return result
    return block_reduce


def shuffle_warp_reduction(combine, identity):
    """combine(x) over each warp by shuffles, the result returned to its every lane; the
    scratch argument is the twin's (unused here), so the two share one signature."""
    warp_reduce = _warp_reduction(combine)

    @cuda.jit(device=True, inline=True)
    def warp_reduce_with_scratch(x, scratch):
        return warp_reduce(x)
    return warp_reduce_with_scratch


def shared_warp_reduction(combine, identity):
    """The simulator-safe twin: every thread posts x to scratch (one slot per thread), then
    each folds its warp's slots in order. It synchronises the block, so every warp must
    call it as often as the others (the kernels guard rows, not calls)."""
    @cuda.jit(device=True)
    def warp_reduce(x, scratch):
        tid = cuda.threadIdx.x
        scratch[tid] = x
        cuda.syncthreads()
        first = tid - tid % WARP
        total = identity
        for i in range(first, min(first + WARP, cuda.blockDim.x)):
            total = combine(total, scratch[i])
        cuda.syncthreads()          # scratch may be reused by the next reduction
        return total
    return warp_reduce


_reduction = shared_reduction if SIMULATOR else shuffle_reduction
block_sum = _reduction(_add, np.float32(0.0))
block_max = _reduction(_max, np.float32(-np.inf))
warp_sum = (shared_warp_reduction if SIMULATOR else shuffle_warp_reduction)(
    _add, np.float32(0.0))
