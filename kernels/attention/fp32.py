"""Causal attention in float32 on the CUDA cores, over all heads at once, forward and
backward: the ``--precision fp32`` path (``attention`` routes float32 heads here).

NumPy twins: ``microgpt.reference.attention_forward`` and ``attention_backward``.
q, k, v, out (B, H, T, D); lse (B, H, T), the natural-log logsumexp of each row of the
scaled scores, the one statistic the backward needs.

One kernel body per pass, launched on grid (blocks_per_head, H, B): the grid carries all
heads and the kernel never knows there are several. Each block walks the row tiles of its
(batch, head) that are its own: tiles x, x + blocks_per_head, ... With blocks_per_head = 1
this is the seed's kernel, one thread block per (batch, head), the default once B * H
alone fills the GPU; below that every row tile gets a block of its own (query tiles on
the grid), which also balances the causal rows' unequal work across SMs.
Threads of a block own one row each, cooperate in staging tiles of the other side in
shared memory, and no T x T matrix ever reaches global memory:

forward     thread = query row i, its scaled q row and output accumulator in registers.
            K and V tiles are staged in shared memory once per query tile (not once per
            query); the tile's scores go to shared memory, then an online softmax
            rescales the accumulator once per tile. Writes out and lse.
backward dq thread = query row i, same walk as the forward: delta = rowsum(dout * out) of
            its row (written: an output of the op, read by the next pass), then P is
            recomputed from q, k and lse, dP = dout v^T, dS = P (dP - delta), dq += dS k.
backward    thread = key row j, its k and v rows in shared memory (one padded row per
dk, dv      thread) and its dk, dv accumulators in registers; tiles of q and dout rows
            i >= j are staged in turn, with their lse and delta: dv += P^T dout,
            dk += dS^T q. No atomics: each dq, dk, dv and delta element has one owner, so
            the backward is deterministic.

head_dim D is a compile-time constant of each kernel (one compile per model), so the
per-row loops over D unroll into registers; any D works, and tiles shrink to fit 48 KiB
of static shared memory. Causal imbalance: the longest rows go first (the last query
tiles, the first key tiles).
"""
import functools
import math

import numpy as np
from numba import cuda, float32

from ..cache import jit
from ..common import ceil_div, check_array, check_block_size, check_not_empty, row_block
from ..device import SHARED_LIMIT

ROWS = 64                        # default rows (threads) per block
MAX_TILE = 32                    # rows of the other side staged at a time
SHARED_FLOATS = SHARED_LIMIT // 4   # static shared memory of a block, in float32s
# with this many (batch, head) pairs one block each already fills an H200 (132 SMs, ~8
# resident blocks each); below it, every row tile gets its own block
FULL_GRID_HEADS = 1024
NEG_INF = np.float32(-np.inf)
ZERO = np.float32(0.0)


def _padded(D):
    """Row stride of a shared array whose rows are read one per thread at the same column:
    odd, so the 32 threads of a warp hit 32 different banks."""
    return D | 1


# shared float32s of each kernel as (fixed, per staged row): the staged tile length is
# the largest that fits, up to MAX_TILE
def _forward_shared(D, rows):
    return 0, 2 * D + rows                 # k, v tiles; the tile's scores, per query row


def _dq_shared(D, rows):
    return rows * _padded(D), 2 * D        # dout rows, one per thread; k, v tiles


def _dkdv_shared(D, rows):
    return 2 * rows * _padded(D), 2 * D + 2    # k, v rows; q, dout tiles, lse, delta


def _tile_length(shared, D, rows):
    fixed, per_row = shared(D, rows)
    return min(MAX_TILE, (SHARED_FLOATS - fixed) // per_row)


def _geometry(shared, D, T, n_heads, block, blocks_per_head):
    """(rows per block, staged tile length, grid x) for a kernel with this shared budget."""
    if block is None:     # whole warps, no more than the rows there are
        block = row_block(T, ROWS)
        while block > 1 and _tile_length(shared, D, block) < 1:
            block //= 2
    check_block_size(block)
    tile = _tile_length(shared, D, block)
    if tile < 1:
        raise ValueError(f"head_dim {D} with {block} rows per block does not fit in "
                         f"{SHARED_FLOATS * 4} bytes of shared memory; use a smaller block")
    n_tiles = ceil_div(T, block)
    if blocks_per_head is None:
        blocks_per_head = 1 if n_heads >= FULL_GRID_HEADS else n_tiles
    if blocks_per_head < 1:
        raise ValueError(f"blocks_per_head must be at least 1, got {blocks_per_head}")
    return block, tile, min(blocks_per_head, n_tiles)


# ----------------------------------------------------------------------------------
# device helpers, made per head_dim so the loops over D unroll

@functools.cache
def _row_helpers(D):
    @cuda.jit(device=True)
    def dot(x, i, y, j):
        """x[i, :D] . y[j, :D] as four interleaved partial sums: independent FMA chains."""
        s0 = s1 = s2 = s3 = ZERO
        for d in range(0, D - 3, 4):
            s0 += x[i, d] * y[j, d]
            s1 += x[i, d + 1] * y[j, d + 1]
            s2 += x[i, d + 2] * y[j, d + 2]
            s3 += x[i, d + 3] * y[j, d + 3]
        for d in range(D - D % 4, D):
            s0 += x[i, d] * y[j, d]
        return (s0 + s1) + (s2 + s3)

    @cuda.jit(device=True)
    def stage_rows(tile, src, b, h, row0, n_rows):
        """tile[:n_rows, :D] = src[b, h, row0 : row0 + n_rows, :], coalesced, by every
        thread of the block (the caller synchronises)."""
        for e in range(cuda.threadIdx.x, n_rows * D, cuda.blockDim.x):
            r = e // D
            d = e - r * D
            tile[r, d] = src[b, h, row0 + r, d]

    return dot, stage_rows


# ----------------------------------------------------------------------------------
# forward

@functools.cache
def _forward_kernel(D, rows, keys):
    dot, stage_rows = _row_helpers(D)
    scale = np.float32(1.0 / math.sqrt(D))

    @jit
    def attention_forward_kernel(out, lse, q, k, v):
        # out, q, k, v (B, H, T, D); lse (B, H, T). Block (x, h, b), thread = query row.
        h, b = cuda.blockIdx.y, cuda.blockIdx.z
        tid = cuda.threadIdx.x
        T = q.shape[2]
        k_tile = cuda.shared.array((keys, D), float32)
        v_tile = cuda.shared.array((keys, D), float32)
        scores = cuda.shared.array((keys, rows), float32)   # column tid is this thread's
        q_row = cuda.local.array((1, D), float32)
        acc = cuda.local.array(D, float32)

        n_tiles = (T + rows - 1) // rows
        for tile_step in range(cuda.blockIdx.x, n_tiles, cuda.gridDim.x):
            row0 = (n_tiles - 1 - tile_step) * rows
            i = row0 + tid
            if i < T:
                for d in range(D):
                    q_row[0, d] = q[b, h, i, d] * scale
                    acc[d] = ZERO
            row_max = NEG_INF
            row_sum = ZERO
            for key0 in range(0, min(T, row0 + rows), keys):
                n_staged = min(keys, T - key0)
                stage_rows(k_tile, k, b, h, key0, n_staged)
                stage_rows(v_tile, v, b, h, key0, n_staged)
                cuda.syncthreads()
                n_keys = min(keys, i + 1 - key0) if i < T else 0    # causal: key <= i
                if n_keys > 0:
                    tile_max = NEG_INF
                    for j in range(n_keys):
                        s = dot(q_row, 0, k_tile, j)
                        scores[j, tid] = s
                        tile_max = max(tile_max, s)
                    new_max = max(row_max, tile_max)
                    correction = math.exp(row_max - new_max)
                    row_sum *= correction
                    for d in range(D):
                        acc[d] *= correction
                    for j in range(n_keys):
                        p = math.exp(scores[j, tid] - new_max)
                        row_sum += p
                        for d in range(D):
                            acc[d] += p * v_tile[j, d]
                    row_max = new_max
                cuda.syncthreads()
            if i < T:
                for d in range(D):
                    out[b, h, i, d] = acc[d] / row_sum
                lse[b, h, i] = row_max + math.log(row_sum)

    return attention_forward_kernel


# ----------------------------------------------------------------------------------
# backward: dq by query rows, dk and dv by key rows

@functools.cache
def _dq_kernel(D, rows, keys):
    dot, stage_rows = _row_helpers(D)
    scale = np.float32(1.0 / math.sqrt(D))
    padded = _padded(D)

    @jit
    def attention_backward_dq_kernel(dq, delta, dout, q, k, v, out, lse):
        # dq, dout, q, k, v, out (B, H, T, D); delta, lse (B, H, T): delta is written.
        # Thread = query row.
        h, b = cuda.blockIdx.y, cuda.blockIdx.z
        tid = cuda.threadIdx.x
        T = q.shape[2]
        k_tile = cuda.shared.array((keys, D), float32)
        v_tile = cuda.shared.array((keys, D), float32)
        dout_rows = cuda.shared.array((rows, padded), float32)    # row tid is ours
        q_row = cuda.local.array((1, D), float32)
        dq_acc = cuda.local.array(D, float32)

        n_tiles = (T + rows - 1) // rows
        for tile_step in range(cuda.blockIdx.x, n_tiles, cuda.gridDim.x):
            row0 = (n_tiles - 1 - tile_step) * rows
            i = row0 + tid
            stage_rows(dout_rows, dout, b, h, row0, min(rows, T - row0))
            cuda.syncthreads()
            row_lse = ZERO
            row_delta = ZERO        # rowsum(dout * out) = rowsum(dP * P)
            if i < T:
                row_lse = lse[b, h, i]
                for d in range(D):
                    q_row[0, d] = q[b, h, i, d] * scale
                    dq_acc[d] = ZERO
                    row_delta += dout_rows[tid, d] * out[b, h, i, d]
                delta[b, h, i] = row_delta
            for key0 in range(0, min(T, row0 + rows), keys):
                n_staged = min(keys, T - key0)
                stage_rows(k_tile, k, b, h, key0, n_staged)
                stage_rows(v_tile, v, b, h, key0, n_staged)
                cuda.syncthreads()
                n_keys = min(keys, i + 1 - key0) if i < T else 0
                for j in range(n_keys):
                    p = math.exp(dot(q_row, 0, k_tile, j) - row_lse)
                    ds = p * (dot(dout_rows, tid, v_tile, j) - row_delta)
                    for d in range(D):
                        dq_acc[d] += ds * k_tile[j, d]
                cuda.syncthreads()
            if i < T:
                for d in range(D):
                    dq[b, h, i, d] = dq_acc[d] * scale

    return attention_backward_dq_kernel


@functools.cache
def _dkdv_kernel(D, rows, queries):
    dot, stage_rows = _row_helpers(D)
    scale = np.float32(1.0 / math.sqrt(D))
    padded = _padded(D)

    @jit
    def attention_backward_dkdv_kernel(dk, dv, dout, q, k, v, lse, delta):
        # dk, dv, dout, q, k, v (B, H, T, D); lse, delta (B, H, T): delta is the dq
        # pass's. Thread = key row.
        h, b = cuda.blockIdx.y, cuda.blockIdx.z
        tid = cuda.threadIdx.x
        T = q.shape[2]
        k_rows = cuda.shared.array((rows, padded), float32)      # row tid is ours
        v_rows = cuda.shared.array((rows, padded), float32)
        q_tile = cuda.shared.array((queries, D), float32)
        dout_tile = cuda.shared.array((queries, D), float32)
        lse_tile = cuda.shared.array(queries, float32)
        delta_tile = cuda.shared.array(queries, float32)
        dk_acc = cuda.local.array(D, float32)
        dv_acc = cuda.local.array(D, float32)

        n_tiles = (T + rows - 1) // rows
        for key_tile in range(cuda.blockIdx.x, n_tiles, cuda.gridDim.x):
            key0 = key_tile * rows
            j = key0 + tid
            stage_rows(k_rows, k, b, h, key0, min(rows, T - key0))
            stage_rows(v_rows, v, b, h, key0, min(rows, T - key0))
            for d in range(D):
                dk_acc[d] = ZERO
                dv_acc[d] = ZERO
            for query0 in range(key0, T, queries):    # causal: queries i >= key0 only
                n_queries = min(queries, T - query0)
                stage_rows(q_tile, q, b, h, query0, n_queries)
                stage_rows(dout_tile, dout, b, h, query0, n_queries)
                cuda.syncthreads()
                for r in range(tid, n_queries, rows):
                    lse_tile[r] = lse[b, h, query0 + r]
                    delta_tile[r] = delta[b, h, query0 + r]
                cuda.syncthreads()
                if j < T:
                    for r in range(max(0, j - query0), n_queries):
                        p = math.exp(dot(q_tile, r, k_rows, tid) * scale - lse_tile[r])
                        ds = p * (dot(dout_tile, r, v_rows, tid) - delta_tile[r])
                        for d in range(D):
                            dv_acc[d] += p * dout_tile[r, d]
                            dk_acc[d] += ds * q_tile[r, d]
                cuda.syncthreads()
            if j < T:
                for d in range(D):
                    dk[b, h, j, d] = dk_acc[d] * scale
                    dv[b, h, j, d] = dv_acc[d]

    return attention_backward_dkdv_kernel


_HEADS = float32[:, :, :, ::1]
_ROWS3 = float32[:, :, ::1]
PTX_SIGNATURES = [
    entry
    for D in (4, 64, 72)
    for entry in [
        (_forward_kernel(D, ROWS, _tile_length(_forward_shared, D, ROWS)),
         (_HEADS, _ROWS3, _HEADS, _HEADS, _HEADS)),
        (_dq_kernel(D, ROWS, _tile_length(_dq_shared, D, ROWS)),
         (_HEADS, _ROWS3) + (_HEADS,) * 5 + (_ROWS3,)),
        (_dkdv_kernel(D, ROWS, _tile_length(_dkdv_shared, D, ROWS)),
         (_HEADS,) * 6 + (_ROWS3,) * 2),
    ]
]


# ----------------------------------------------------------------------------------
# launchers

def _check_heads(rows3, **heads):
    """All head arrays (B, H, T, D) alike, the per-row arrays (B, H, T); returns
    (B, H, T, D)."""
    first_name, first = next(iter(heads.items()))
    if len(first.shape) != 4:
        raise ValueError(f"{first_name}: expected shape (B, H, T, D), got {tuple(first.shape)}")
    for name, arr in heads.items():
        check_array(name, arr, first.shape)
    for name, arr in rows3.items():
        check_array(name, arr, first.shape[:3])
    check_not_empty("head_dim", first.shape[3])
    return first.shape


def attention_forward(out, lse, q, k, v, *, block=None, blocks_per_head=None, stream=0):
    """out (B, H, T, D) = causal softmax(q k^T / sqrt(D)) v per (batch, head), float32;
    lse (B, H, T) = each row's logsumexp of the scaled scores. block: query rows (threads)
    per block; blocks_per_head: 1 for one block per (batch, head), default by shape."""
    B, H, T, D = _check_heads(dict(lse=lse), q=q, k=k, v=v, out=out)
    if q.size == 0:
        return
    rows, keys, grid_x = _geometry(_forward_shared, D, T, B * H, block, blocks_per_head)
    _forward_kernel(D, rows, keys)[(grid_x, H, B), rows, stream](out, lse, q, k, v)


def attention_backward(dq, dk, dv, delta, dout, q, k, v, out, lse, *, block=None,
                       blocks_per_head=None, stream=0):
    """dq, dk, dv (B, H, T, D) and delta (B, H, T) = rowsum(dout * out), overwritten, from
    dout (B, H, T, D) and the forward's q, k, v, out and lse; P is recomputed from q, k
    and lse. Two launches: dq by query rows (writing delta), then dk and dv by key rows
    (reading it); block and blocks_per_head apply to both."""
    B, H, T, D = _check_heads(dict(lse=lse, delta=delta), q=q, k=k, v=v, out=out, dout=dout,
                              dq=dq, dk=dk, dv=dv)
    if q.size == 0:
        return
    rows, keys, grid_x = _geometry(_dq_shared, D, T, B * H, block, blocks_per_head)
    _dq_kernel(D, rows, keys)[(grid_x, H, B), rows, stream](
        dq, delta, dout, q, k, v, out, lse)
    rows, queries, grid_x = _geometry(_dkdv_shared, D, T, B * H, block, blocks_per_head)
    _dkdv_kernel(D, rows, queries)[(grid_x, H, B), rows, stream](
        dk, dv, dout, q, k, v, lse, delta)
