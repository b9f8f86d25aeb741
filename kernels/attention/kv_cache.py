"""Generation's KV cache: writing new positions into it, and their attention against it.

NumPy twins: ``microgpt.reference.kv_cache_rows`` (what kv_cache_write writes) and
``microgpt.reference.attention_cached_forward``.

The cache of one layer is kv_cache (B, S, 2C): the keys in columns [0:C] and the values in
[C:2C] of each position's row, head h at columns h*D, the layout of the QKV projection's
columns [C:3C]. So the write is a copy of row slices, and attention reads q from the fused
qkv (B, T, 3C) and writes out (B, T, C) in the merged layout: no split or merge launches.

kv_cache_write: grid (ceil(2C / block), T, B), one thread per copied element, coalesced
on both sides.

attention_cached_forward: grid (T, H, B), a block per new position and head, the shape
of a decoding step (T = 1, many cached keys). Its threads walk the keys a tile of
blockDim at a time, thread = key: a score each, the tile's max and sum by block
reductions, an online softmax across tiles; thread d < D then owns output column d and
accumulates p . v over the tile's keys from shared memory. D is a compile-time constant
(the q row sits in shared memory), and the block holds at least D threads, whole warps
(block_max / block_sum shuffle on the GPU).
"""
import functools
import math

import numpy as np
from numba import cuda, float32, int64

from ..cache import jit
from ..common import (REDUCE_SCRATCH, WARP, block_max, block_sum, ceil_div, check_array,
                      check_block_size, check_not_empty, row_block)

BLOCK = 256                 # kv_cache_write
NEG_INF = np.float32(-np.inf)
ZERO = np.float32(0.0)


# ----------------------------------------------------------------------------------
# kernels

@jit
def _kv_cache_write_kernel(kv_cache, qkv, start):
    # kv_cache (B, S, 2C), qkv (B, T, 3C): kv_cache[b, start + t] = qkv[b, t, C:]
    col = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
    t, b = cuda.blockIdx.y, cuda.blockIdx.z
    width = kv_cache.shape[2]
    if col < width:
        kv_cache[b, start + t, col] = qkv[b, t, qkv.shape[2] - width + col]


@functools.cache
def _attention_cached_kernel(D, keys):
    scale = np.float32(1.0 / math.sqrt(D))

    @jit
    def attention_cached_forward_kernel(out, qkv, kv_cache, start):
        # out (B, T, C), qkv (B, T, 3C), kv_cache (B, S, 2C). Block (i, h, b) = new
        # position start + i of head h; thread = a key of each tile, and output column tid.
        i, h, b = cuda.blockIdx.x, cuda.blockIdx.y, cuda.blockIdx.z
        tid = cuda.threadIdx.x
        C = out.shape[2]
        q_row = cuda.shared.array(D, float32)
        p_tile = cuda.shared.array(keys, float32)
        scratch = cuda.shared.array(REDUCE_SCRATCH, float32)
        if tid < D:
            q_row[tid] = qkv[b, i, h * D + tid] * scale
        cuda.syncthreads()
        n_keys = start + i + 1                      # causal: keys 0 .. start + i
        row_max = NEG_INF
        row_sum = ZERO
        acc = ZERO                                  # output column tid (tid < D)
        for key0 in range(0, n_keys, keys):
            j = key0 + tid
            s = NEG_INF
            if j < n_keys:
                s = ZERO
                for d in range(D):
                    s += q_row[d] * kv_cache[b, j, h * D + d]
            new_max = max(row_max, block_max(s, scratch))
            p = math.exp(s - new_max) if j < n_keys else ZERO
            p_tile[tid] = p
            correction = math.exp(row_max - new_max)
            row_sum = row_sum * correction + block_sum(p, scratch)   # syncs: p_tile is seen
            row_max = new_max
            if tid < D:
                acc *= correction
                for jj in range(min(keys, n_keys - key0)):
                    acc += p_tile[jj] * kv_cache[b, key0 + jj, C + h * D + tid]
            cuda.syncthreads()                      # p_tile is rewritten by the next tile
        if tid < D:
            out[b, i, h * D + tid] = acc / row_sum

    return attention_cached_forward_kernel


_ROWS3 = float32[:, :, ::1]
PTX_SIGNATURES = [(_kv_cache_write_kernel, (_ROWS3, _ROWS3, int64))] + [
    (_attention_cached_kernel(D, block), (_ROWS3, _ROWS3, _ROWS3, int64))
    for D, block in ((4, 32), (64, 64), (72, 96), (64, 256))]


# ----------------------------------------------------------------------------------
# launchers

def _check(qkv, kv_cache, start):
    """-> (B, T, C, S) for qkv (B, T, 3C) and kv_cache (B, S, 2C) with room for the T
    positions from start."""
    if len(qkv.shape) != 3 or qkv.shape[2] % 3:
        raise ValueError(f"qkv: expected shape (B, T, 3C), got {tuple(qkv.shape)}")
    B, T, C3 = qkv.shape
    C = C3 // 3
    if len(kv_cache.shape) != 3:
        raise ValueError(f"kv_cache: expected shape (B, S, {2 * C}), got "
                         f"{tuple(kv_cache.shape)}")
    S = kv_cache.shape[1]
    check_array("qkv", qkv, (B, T, C3))
    check_array("kv_cache", kv_cache, (B, S, 2 * C))
    if not 0 <= start <= S - T:
        raise ValueError(f"positions {start} .. {start + T - 1} do not fit in a cache of "
                         f"{S} positions")
    return B, T, C, S


def kv_cache_write(kv_cache, qkv, start, *, block=None, stream=0):
    """kv_cache (B, S, 2C) rows start .. start+T-1 = the K and V columns [C:3C] of qkv
    (B, T, 3C); the other rows are left as they are."""
    B, T, C, _ = _check(qkv, kv_cache, start)
    if block is None:
        block = row_block(2 * C, BLOCK)
    check_block_size(block)
    if qkv.size == 0:
        return
    grid = (ceil_div(2 * C, block), T, B)
    _kv_cache_write_kernel[grid, block, stream](kv_cache, qkv, start)


def attention_cached_forward(out, qkv, kv_cache, start, n_head, *, block=None, stream=0):
    """out (B, T, C), heads merged = causal softmax(q k^T / sqrt(D)) v for the positions
    start .. start+T-1, their q in qkv (B, T, 3C), against the keys and values of
    kv_cache (B, S, 2C) at positions 0 .. start+T-1 (write the new ones first).
    block: keys per tile (threads), whole warps and at least head_dim; by default the
    fewest warps that cover head_dim, one compile per model whatever the cache holds."""
    B, T, C, _ = _check(qkv, kv_cache, start)
    check_array("out", out, (B, T, C))
    if n_head < 1 or C % n_head:
        raise ValueError(f"n_head {n_head} does not divide d_model {C}")
    D = C // n_head
    check_not_empty("head_dim", D)
    if block is None:
        block = ceil_div(D, WARP) * WARP
    check_block_size(block, WARP)
    if block < D:
        raise ValueError(f"block {block} is below head_dim {D}: a thread owns each output "
                         "column; pass a larger block")
    if qkv.size == 0:
        return
    _attention_cached_kernel(D, block)[(T, n_head, B), block, stream](out, qkv, kv_cache, start)
