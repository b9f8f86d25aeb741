"""Products of few rows, out (M, N) = a (M, K) @ b: a decoding step's GEMMs (M = the
batch, at most ROWS), which read each weight once and so run at the memory's rate if
enough of the GPU reads at once; the tiled GEMMs (kernels/gemm.py) give so few rows a
handful of blocks.

NumPy twin: ``microgpt.reference.matmul_forward`` (and ``gelu_forward`` for the
epilogue). Any of out, a and b may be float32 or bf16 (uint16), each on its own; the
arithmetic is float32.

b (K, N): grid (ceil(N / 128), splits), block 256 threads, 8 warps. A lane owns 4
adjacent columns (one vector load of a row of b, 8 or 16 bytes), the block's 128
columns are one coalesced row of a warp, and the warps take every 8th row of the
split's range of K, UNROLL rows a lane loaded before it multiplies them (the loads in
flight are what reads memory at its rate); the warps' sums meet in shared memory. splits
cuts K so that about TARGET_BLOCKS blocks read at once.
b (N, K) (transpose_b: the tied LM head, wte): grid (ceil(N / 32),), 8 warps, a warp per
COLUMNS_PER_WARP columns loaded together: its lanes read b's rows in groups of 4, a's
rows once for all of them, and the warp sums each row of a's dot products.

With several splits each block writes its (M, 128) sums to a scratch array, and the last
block of a column tile to finish (a ticket from an atomic counter, after a fence) adds
them in split order, so the result has the same bits whichever finishes last, runs the
epilogue and resets the counter. Epilogue "gelu": pre = the product, out = gelu(pre)
(the MLP's up projection).
"""
import functools

import numpy as np
from numba import cuda, float32, int32, uint16

from ..cache import jit
from ..common import REDUCE_SCRATCH, SIMULATOR, WARP, ceil_div, kept_with, warp_sum
from ..elementwise import gelu
from ..precision import (GROUP, check_activation, group_width, load_float32, load_group4,
                         store_float32)

ROWS = 16                   # the most rows a skinny product takes
TILE = 128                  # columns of a block (b (K, N))
WARPS = 2 if SIMULATOR else 8     # the simulator runs a thread at a time
UNROLL = 4                  # rows of b a lane loads before it multiplies: loads in flight
COLUMNS_PER_WARP = 4        # transpose_b: columns a warp takes together
TARGET_BLOCKS = 4 * 132     # four blocks on each of the H200's SMs
ZERO = np.float32(0.0)
_UNROLLED, _COLUMNS_LOADED = UNROLL * GROUP, COLUMNS_PER_WARP * GROUP   # local arrays' sizes


@functools.cache
def _skinny_kernel(M, width, gelu_epilogue):
    """b (K, N); width GROUP: b's rows load in vectors of 4."""
    @cuda.jit(device=True, inline=True)
    def finish(out, pre, m, c, total):
        if c < out.shape[1]:
            if gelu_epilogue:
                store_float32(pre, (m, c), total)
                store_float32(out, (m, c), gelu(total))
            else:
                store_float32(out, (m, c), total)

    @jit
    def skinny_matmul_kernel(out, pre, a, b, rows_per_split, partial, tickets):
        # out, pre (M, N) (pre: gelu's, else out again); a (M, K); b (K, N); partial
        # (splits, M, N) float32 scratch, tickets (tiles,) int32 (zero between launches)
        tile, split = cuda.blockIdx.x, cuda.blockIdx.y
        tid = cuda.threadIdx.x
        lane, warp = tid % WARP, tid // WARP
        K, N = b.shape
        col = tile * TILE + lane * GROUP
        acc = cuda.local.array((M, GROUP), float32)
        w = cuda.local.array(_UNROLLED, float32)
        for m in range(M):
            for j in range(GROUP):
                acc[m, j] = ZERO
        k_end = min(K, (split + 1) * rows_per_split)
        if col < N:
            for k0 in range(split * rows_per_split + warp, k_end, WARPS * UNROLL):
                for u in range(UNROLL):             # the loads first, all in flight
                    k = k0 + u * WARPS
                    if k < k_end and width == GROUP:
                        load_group4(w, u * GROUP, b, (k, col))
                    else:
                        for j in range(GROUP):
                            w[u * GROUP + j] = load_float32(b, (k, col + j)) \
                                if k < k_end and col + j < N else ZERO
                for u in range(UNROLL):
                    k = k0 + u * WARPS
                    if k < k_end:
                        for m in range(M):
                            x = load_float32(a, (m, k))
                            for j in range(GROUP):
                                acc[m, j] += x * w[u * GROUP + j]
        # the warps' sums into shared memory, warp after warp (a fixed order; acc is
        # indexed by constants only, so it stays in registers)
        sums = cuda.shared.array((M, TILE), float32)
        last = cuda.shared.array(1, int32)
        splits = cuda.gridDim.y
        for w in range(WARPS):
            if warp == w:
                for m in range(M):
                    for j in range(GROUP):
                        if w == 0:
                            sums[m, lane * GROUP + j] = acc[m, j]
                        else:
                            sums[m, lane * GROUP + j] += acc[m, j]
            cuda.syncthreads()
        for e in range(tid, M * TILE, cuda.blockDim.x):
            m, t = e // TILE, e % TILE
            if splits == 1:
                finish(out, pre, m, tile * TILE + t, sums[m, t])
            elif tile * TILE + t < N:
                partial[split, m, tile * TILE + t] = sums[m, t]
        if splits == 1:
            return
        cuda.threadfence()          # the partials are seen before the ticket is
        cuda.syncthreads()
        if tid == 0:
            last[0] = cuda.atomic.add(tickets, tile, 1) == splits - 1
        cuda.syncthreads()
        if last[0] == 0:
            return
        for e in range(tid, M * TILE, cuda.blockDim.x):
            m, c = e // TILE, tile * TILE + e % TILE
            if c < N:
                total = ZERO
                for i in range(splits):
                    total += partial[i, m, c]
                finish(out, pre, m, c, total)
        if tid == 0:
            tickets[tile] = 0

    return skinny_matmul_kernel


@functools.cache
def _skinny_transposed_kernel(M, width):
    """b (N, K): a warp per COLUMNS_PER_WARP columns; width GROUP: a's and b's rows load in
    vectors of 4."""
    @jit
    def skinny_matmul_transposed_kernel(out, a, b):
        # out (M, N), a (M, K), b (N, K)
        tid = cuda.threadIdx.x
        lane, warp = tid % WARP, tid // WARP
        N, K = b.shape
        scratch = cuda.shared.array(REDUCE_SCRATCH, float32)
        acc = cuda.local.array((M, COLUMNS_PER_WARP), float32)
        w = cuda.local.array(_COLUMNS_LOADED, float32)
        x = cuda.local.array(GROUP, float32)
        first = (cuda.blockIdx.x * (cuda.blockDim.x // WARP) + warp) * COLUMNS_PER_WARP
        for m in range(M):
            for c in range(COLUMNS_PER_WARP):
                acc[m, c] = ZERO
        for k in range(lane * GROUP, K, WARP * GROUP):
            for c in range(COLUMNS_PER_WARP):       # the columns' loads, all in flight
                n = first + c
                if n < N and width == GROUP:
                    load_group4(w, c * GROUP, b, (n, k))
                else:
                    for j in range(GROUP):
                        w[c * GROUP + j] = load_float32(b, (n, k + j)) if n < N and k + j < K \
                            else ZERO
            for m in range(M):
                if width == GROUP:
                    load_group4(x, 0, a, (m, k))
                else:
                    for j in range(GROUP):
                        x[j] = load_float32(a, (m, k + j)) if k + j < K else ZERO
                for c in range(COLUMNS_PER_WARP):
                    for j in range(GROUP):
                        acc[m, c] += x[j] * w[c * GROUP + j]
        for m in range(M):          # every warp reduces as often (the twin syncs)
            for c in range(COLUMNS_PER_WARP):
                total = warp_sum(acc[m, c], scratch)
                if lane == 0 and first + c < N:
                    store_float32(out, (m, first + c), total)

    return skinny_matmul_transposed_kernel


_F32, _BF16 = float32[:, ::1], uint16[:, ::1]
_DTYPES = (np.dtype(np.float32), np.dtype(np.uint16))
_PARTIAL, _TICKETS = float32[:, :, ::1], int32[::1]
PTX_SIGNATURES = (
    # andrea-120m's decoding in bf16 (qkv and fc bf16, proj float32) at batch 1 and 16,
    # and float32 with rows that do not divide into groups
    [(_skinny_kernel(M, GROUP, False), (out, out, _BF16, _BF16, int32, _PARTIAL, _TICKETS))
     for M in (1, 16) for out in (_BF16, _F32)] +
    [(_skinny_kernel(M, GROUP, True), (_BF16, _BF16, _BF16, _BF16, int32, _PARTIAL,
                                       _TICKETS)) for M in (1, 16)] +
    [(_skinny_kernel(3, 1, False), (_F32, _F32, _F32, _F32, int32, _PARTIAL, _TICKETS)),
     (_skinny_kernel(3, GROUP, True), (_F32, _F32, _F32, _F32, int32, _PARTIAL, _TICKETS))] +
    [(_skinny_transposed_kernel(M, GROUP), (_BF16, _BF16, _BF16)) for M in (1, 16)] +
    [(_skinny_transposed_kernel(3, width), (_F32, _F32, _F32)) for width in (1, GROUP)])


def takes(out, a, b, transpose_a=False, accumulate=False, *others):
    """Whether the GEMM router sends this product here: 1 to ROWS rows of out, a not
    transposed, out overwritten, every array a contiguous float32 or bf16 matrix; on a
    GPU. (In the simulator every test model's step has at most ROWS rows, and a product
    here cost ~6 s of simulated threads against the float32 kernel's 0.3: there the
    router keeps to the training kernels, and test_kernels_skinny tests this one.)"""
    arrays = (out, a, b, *others)
    return (not SIMULATOR and not transpose_a and not accumulate
            and all(hasattr(arr, "copy_to_host") and len(arr.shape) == 2 and arr.dtype in _DTYPES
                    and arr.is_c_contiguous() for arr in arrays)
            and 1 <= out.shape[0] <= ROWS)


def skinny_matmul(out, a, b, transpose_b=False, *, gelu_pre=None, stream=0):
    """out (M, N) = a (M, K) @ b, b (K, N), or b^T for b (N, K) when transpose_b, M at
    most ROWS; with gelu_pre (M, N) (b (K, N) only), gelu_pre = the product and out =
    gelu of it. Each array float32 or bf16, contiguous."""
    for name, arr in (("out", out), ("a", a), ("b", b)):
        if len(arr.shape) != 2:
            raise ValueError(f"{name}: expected a 2-D matrix, got shape {tuple(arr.shape)}")
    M, N = out.shape
    K = a.shape[1]
    if not 1 <= M <= ROWS:
        raise ValueError(f"a skinny product takes 1 to {ROWS} rows, got {M}")
    check_activation("out", out, (M, N))
    check_activation("a", a, (M, K))
    check_activation("b", b, (N, K) if transpose_b else (K, N))
    if gelu_pre is not None:
        if transpose_b:
            raise ValueError("gelu_pre: the GELU epilogue is the up projection's, b (K, N)")
        check_activation("gelu_pre", gelu_pre, (M, N))
    if N == 0:
        return
    if transpose_b:
        width = GROUP if K % GROUP == 0 and group_width(K, a, b) == GROUP else 1
        threads = WARPS * WARP
        grid = ceil_div(N, threads // WARP * COLUMNS_PER_WARP)
        _skinny_transposed_kernel(M, width)[grid, threads, stream](out, a, b)
        return
    width = group_width(N, b)
    tiles = ceil_div(N, TILE)
    # splits of at least a row per lane's load in flight
    splits = max(1, min(ceil_div(TARGET_BLOCKS, tiles), K // (WARPS * UNROLL)))
    rows_per_split = ceil_div(K, splits) if K else 1
    splits = ceil_div(K, rows_per_split) if K else 1
    partial = kept_with(out, ("skinny", splits, M, N), lambda: cuda.device_array(
        (splits, M, N), np.float32))
    tickets = kept_with(out, ("skinny_tickets", tiles), lambda: cuda.to_device(
        np.zeros(tiles, np.int32)))
    pre = out if gelu_pre is None else gelu_pre
    _skinny_kernel(M, width, gelu_pre is not None)[(tiles, splits), WARPS * WARP, stream](
        out, pre, a, b, rows_per_split, partial, tickets)
