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

The row count M is read from out at run time, so a batch of any size runs kernels already
compiled: the tensor cores' kernels take 16 rows whatever M is (one compilation each); the
CUDA cores' keep a lane's M sums in registers, which needs a bound known when they compile,
so they compile per power of two of rows (row_bound: 1, 2, 4, 8, 16) and leave the rows
past M alone.
"""
import functools

import numpy as np
from numba import cuda, float32, int32, uint16, uint32

from ..atoms import mma_bf16_16816
from ..cache import jit
from ..common import (REDUCE_SCRATCH, SIMULATOR, WARP, ceil_div, device_address, kept_with,
                      warp_sum)
from ..device import MMA_K, MMA_N
from ..elementwise import gelu
from ..precision import (GROUP, check_activation, group_width, is_bf16, load_float32,
                         load_group4, store_float32)

ROWS = 16                   # the most rows a skinny product takes
TILE = 128                  # columns of a block (b (K, N))
WARPS = 2 if SIMULATOR else 8     # the simulator runs a thread at a time
UNROLL = 4                  # rows of b a lane loads before it multiplies: loads in flight
COLUMNS_PER_WARP = 4        # transpose_b: columns a warp takes together
TARGET_BLOCKS = 4 * 132     # four blocks on each of the H200's SMs
MMA_COLUMNS = 8 * MMA_N      # a warp's columns on the tensor cores: 8 mma tiles
MMA_TILES = MMA_COLUMNS // MMA_N
# k-blocks of 16 rows a warp loads before its mmas (read at each launch: a bench sweeps
# them), for products of fewer than MANY_ROWS rows and of more: at K 768 three make two
# splits, six one; more rows make larger partials for the splits' combine. On the H200
# (docs/generation.md, session 20) three took the fastest step at batch 1 (andrea-120m
# and andrea-12m), six at batch 16.
MMA_UNROLL, MMA_UNROLL_MANY, MANY_ROWS = 3, 6, 9
HEAD_UNROLL = 2             # transposed: chunks of 64 of K a lane loads before its mmas
# bf16 products on the tensor cores (the mma kernels) where their shapes allow; False
# keeps them on the CUDA cores' kernels (tools/profile_decode.py --cuda-cores compares)
TENSOR_CORES = True
ZERO = np.float32(0.0)
_LOW, _HIGH = np.uint32(0xFFFF), np.uint32(0xFFFF0000)
_CHUNK_WORDS = 32           # 64 bf16 of K
_PARTS_PITCH = MMA_COLUMNS + 4     # a warp's row of sums: 4 more spread the banks
_HEAD_WORDS = HEAD_UNROLL * 8
_UNROLLED, _COLUMNS_LOADED = UNROLL * GROUP, COLUMNS_PER_WARP * GROUP   # local arrays' sizes


def row_bound(M):
    """The rows the CUDA cores' kernel for M rows is compiled for: the power of two >= M."""
    return 1 << (M - 1).bit_length()


@functools.cache
def _combine(columns, gelu_epilogue):
    """The end of a (K, N) kernel's block, sums (>= M, columns) in shared memory holding its
    split's sums of the column tile blockIdx.x: with one split, the epilogue into out;
    with several, the partials, and the last block of the tile to finish adds them in
    split order, runs the epilogue and resets the ticket. Every thread calls it."""
    @cuda.jit(device=True, inline=True)
    def finish(out, pre, m, c, total):
        if c < out.shape[1]:
            if gelu_epilogue:
                store_float32(pre, (m, c), total)
                store_float32(out, (m, c), gelu(total))
            else:
                store_float32(out, (m, c), total)

    @cuda.jit(device=True, inline=True)
    def combine(out, pre, sums, last, partial, tickets):
        tile, split = cuda.blockIdx.x, cuda.blockIdx.y
        tid, splits = cuda.threadIdx.x, cuda.gridDim.y
        M, N = out.shape
        for e in range(tid, M * columns, cuda.blockDim.x):
            m, t = e // columns, e % columns
            if splits == 1:
                finish(out, pre, m, tile * columns + t, sums[m, t])
            elif tile * columns + t < N:
                partial[split, m, tile * columns + t] = sums[m, t]
        if splits == 1:
            return
        cuda.threadfence()          # the partials are seen before the ticket is
        cuda.syncthreads()
        if tid == 0:
            last[0] = cuda.atomic.add(tickets, tile, 1) == splits - 1
        cuda.syncthreads()
        if last[0] == 0:
            return
        for e in range(tid, M * columns, cuda.blockDim.x):
            m, c = e // columns, tile * columns + e % columns
            if c < N:
                total = ZERO
                for i in range(splits):
                    total += partial[i, m, c]
                finish(out, pre, m, c, total)
        if tid == 0:
            tickets[tile] = 0
    return combine


@functools.cache
def _skinny_kernel(R, width, gelu_epilogue):
    """b (K, N), at most R rows (row_bound); width GROUP: b's rows load in vectors of 4."""
    combine = _combine(TILE, gelu_epilogue)

    @jit
    def skinny_matmul_kernel(out, pre, a, b, rows_per_split, partial, tickets):
        # out, pre (M, N) (pre: gelu's, else out again), M <= R; a (M, K); b (K, N);
        # partial (splits, M, N) float32 scratch, tickets (tiles,) int32 (zero between
        # launches)
        tile, split = cuda.blockIdx.x, cuda.blockIdx.y
        tid = cuda.threadIdx.x
        lane, warp = tid % WARP, tid // WARP
        K, N = b.shape
        M = out.shape[0]
        col = tile * TILE + lane * GROUP
        acc = cuda.local.array((R, GROUP), float32)
        w = cuda.local.array(_UNROLLED, float32)
        for m in range(R):
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
                        for m in range(R):
                            if m < M:
                                x = load_float32(a, (m, k))
                                for j in range(GROUP):
                                    acc[m, j] += x * w[u * GROUP + j]
        # the warps' sums into shared memory, warp after warp (a fixed order; acc is
        # indexed by constants only, so it stays in registers)
        sums = cuda.shared.array((R, TILE), float32)
        last = cuda.shared.array(1, int32)
        for w in range(WARPS):
            if warp == w:
                for m in range(R):
                    for j in range(GROUP):
                        if w == 0:
                            sums[m, lane * GROUP + j] = acc[m, j]
                        else:
                            sums[m, lane * GROUP + j] += acc[m, j]
            cuda.syncthreads()
        combine(out, pre, sums, last, partial, tickets)

    return skinny_matmul_kernel


@functools.cache
def _skinny_transposed_kernel(R, width):
    """b (N, K): a warp per COLUMNS_PER_WARP columns, at most R rows (row_bound); width
    GROUP: a's and b's rows load in vectors of 4."""
    @jit
    def skinny_matmul_transposed_kernel(out, a, b):
        # out (M, N), M <= R, a (M, K), b (N, K)
        tid = cuda.threadIdx.x
        lane, warp = tid % WARP, tid // WARP
        N, K = b.shape
        M = out.shape[0]
        scratch = cuda.shared.array(REDUCE_SCRATCH, float32)
        acc = cuda.local.array((R, COLUMNS_PER_WARP), float32)
        w = cuda.local.array(_COLUMNS_LOADED, float32)
        x = cuda.local.array(GROUP, float32)
        mine = cuda.local.array(COLUMNS_PER_WARP, float32)
        first = (cuda.blockIdx.x * (cuda.blockDim.x // WARP) + warp) * COLUMNS_PER_WARP
        for m in range(R):
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
            for m in range(R):      # (the rows past M: zeros)
                if m < M and width == GROUP:
                    load_group4(x, 0, a, (m, k))
                else:
                    for j in range(GROUP):
                        x[j] = load_float32(a, (m, k + j)) if m < M and k + j < K else ZERO
                for c in range(COLUMNS_PER_WARP):
                    for j in range(GROUP):
                        acc[m, c] += x[j] * w[c * GROUP + j]
        # every warp reduces as often (the twin syncs); lane m keeps row m's sums and
        # stores them (a store in this loop guarded by M took acc out of registers)
        for m in range(R):
            if m < M:
                for c in range(COLUMNS_PER_WARP):
                    total = warp_sum(acc[m, c], scratch)
                    if lane == m:
                        mine[c] = total
        if lane < M:
            for c in range(COLUMNS_PER_WARP):
                if first + c < N:
                    store_float32(out, (lane, first + c), mine[c])

    return skinny_matmul_transposed_kernel


# ----------------------------------------------------------------------------------
# bf16 on the tensor cores: mma.m16n8k16 takes 16 rows of a, the most a skinny product
# has (the rows past M are zeros), so 16 rows cost what one does

@cuda.jit(device=True, inline=True)
def pair_low(x, y):
    """The bf16 pair (x's low half, y's low half) of two words of pairs."""
    return uint32((x & _LOW) | uint32(y << uint32(16)))


@cuda.jit(device=True, inline=True)
def pair_high(x, y):
    """The bf16 pair (x's high half, y's high half)."""
    return uint32((x >> uint32(16)) | (y & _HIGH))


if SIMULATOR:
    @cuda.jit(device=True)
    def load_words(out, at, arr, index):
        """GROUP words of a uint32 array, bits unchanged (the simulator's load_group4
        goes through float32)."""
        r, c = index
        for i in range(GROUP):
            out[at + i] = arr[r, c + i]
else:
    load_words = load_group4    # on the GPU one 16-byte load, the words' bits unchanged


@functools.cache
def _skinny_mma_kernel(gelu_epilogue, unroll):
    """b (K, N) bf16: a warp per MMA_COLUMNS columns and k-blocks of 16 rows, unroll of
    them loaded before their mmas, lane (g, t) loading its 8 adjacent columns g * 8 ..
    g * 8 + 7 of rows 2t, 2t+1, 2t+8, 2t+9 (four 16-byte loads); mma tile j's column g is
    the lane's column j, so its B fragment is the j-th bf16 of each row, paired by rows."""
    combine = _combine(MMA_COLUMNS, gelu_epilogue)
    b_words, a_words = unroll * 4 * GROUP, unroll * 4

    @jit
    def skinny_mma_kernel(out, pre, a, b, blocks_per_split, partial, tickets):
        # a (M, K / 2) and b (K, N / 2): bf16 pairs as uint32 words; out, pre, partial,
        # tickets as _skinny_kernel's
        tile, split = cuda.blockIdx.x, cuda.blockIdx.y
        tid = cuda.threadIdx.x
        lane, warp = tid % WARP, tid // WARP
        g, t = lane // 4, lane % 4
        K, (M, N) = b.shape[0], out.shape
        word = (tile * MMA_COLUMNS + g * MMA_N) // 2        # the lane's first word of b
        acc = cuda.local.array((MMA_TILES, 4), float32)
        wb = cuda.local.array(b_words, uint32)              # per k-block: 4 rows of 4
        wa = cuda.local.array(a_words, uint32)              # per k-block: a0 .. a3
        for j in range(MMA_TILES):
            for r in range(4):
                acc[j, r] = ZERO
        kb_end = min((K + MMA_K - 1) // MMA_K, (split + 1) * blocks_per_split)
        # every warp the same trips (the simulator's mma is a block barrier)
        for kb0 in range(split * blocks_per_split, kb_end, WARPS * unroll):
            for u in range(unroll):                     # the loads first, all in flight
                kb = kb0 + u * WARPS + warp
                for r in range(4):
                    k = kb * MMA_K + 2 * t + r % 2 + 8 * (r // 2)
                    if kb < kb_end and k < K and word * 2 < N:
                        load_words(wb, u * 16 + r * GROUP, b, (k, word))
                    else:
                        for i in range(GROUP):
                            wb[u * 16 + r * GROUP + i] = uint32(0)
                    m = g + 8 * (r % 2)
                    k = kb * MMA_K + 2 * t + 8 * (r // 2)
                    wa[u * 4 + r] = a[m, k // 2] if kb < kb_end and m < M and k < K \
                        else uint32(0)
            for u in range(unroll):
                for j in range(MMA_TILES):
                    i = u * 16 + j // 2     # word j // 2 of row 2t; + GROUP: row 2t + 1
                    if j % 2 == 0:
                        b0 = pair_low(wb[i], wb[i + GROUP])
                        b1 = pair_low(wb[i + 2 * GROUP], wb[i + 3 * GROUP])
                    else:
                        b0 = pair_high(wb[i], wb[i + GROUP])
                        b1 = pair_high(wb[i + 2 * GROUP], wb[i + 3 * GROUP])
                    acc[j, 0], acc[j, 1], acc[j, 2], acc[j, 3] = mma_bf16_16816(
                        wa[u * 4], wa[u * 4 + 1], wa[u * 4 + 2], wa[u * 4 + 3], b0, b1,
                        acc[j, 0], acc[j, 1], acc[j, 2], acc[j, 3])
        # the warps' sums, each in its own slice, then added in warp order: c0, c1 are
        # row g, logical columns 2t, 2t + 1, c2, c3 row g + 8; logical column n of tile j
        # is column n * 8 + j of the warp's
        parts = cuda.shared.array((WARPS, ROWS, _PARTS_PITCH), float32)
        sums = cuda.shared.array((ROWS, MMA_COLUMNS), float32)
        last = cuda.shared.array(1, int32)
        for j in range(MMA_TILES):
            for r in range(4):
                m = g + 8 * (r // 2)
                if m < M:
                    parts[warp, m, (2 * t + r % 2) * MMA_N + j] = acc[j, r]
        cuda.syncthreads()
        for e in range(tid, M * MMA_COLUMNS, cuda.blockDim.x):
            m, c = e // MMA_COLUMNS, e % MMA_COLUMNS
            total = ZERO
            for w in range(WARPS):
                total += parts[w, m, c]
            sums[m, c] = total
        cuda.syncthreads()
        combine(out, pre, sums, last, partial, tickets)

    return skinny_mma_kernel


@functools.cache
def _skinny_mma_transposed_kernel():
    """b (N, K) bf16 (the tied head): a warp per 8 columns (rows of b) over all of K, in
    chunks of 64: lane (g, t) loads 16 adjacent elements of row g of b, and of rows g
    and g + 8 of a, from 16t on (two 16-byte loads each); k-block j of the chunk takes
    its elements 4j .. 4j + 3 as the logical k 2t, 2t+1 and 2t+8, 2t+9 of the mma, the
    same in a as in b. No reduction across lanes: each lane ends with its own outputs."""
    @jit
    def skinny_mma_transposed_kernel(out, a, b):
        # out (M, N); a (M, K / 2), b (N, K / 2): bf16 pairs as uint32 words
        tid = cuda.threadIdx.x
        lane, warp = tid % WARP, tid // WARP
        g, t = lane // 4, lane % 4
        N, K2 = b.shape
        M = out.shape[0]
        n0 = (cuda.blockIdx.x * (cuda.blockDim.x // WARP) + warp) * MMA_N
        wb = cuda.local.array(_HEAD_WORDS, uint32)
        wa = cuda.local.array(_HEAD_WORDS, uint32)
        wa8 = cuda.local.array(_HEAD_WORDS, uint32)
        c0, c1, c2, c3 = ZERO, ZERO, ZERO, ZERO
        for k0 in range(0, K2, HEAD_UNROLL * _CHUNK_WORDS):
            for u in range(HEAD_UNROLL):                # the loads first, all in flight
                for h in range(2):
                    k = k0 + u * _CHUNK_WORDS + t * 8 + h * GROUP     # in words
                    i = u * 8 + h * GROUP
                    if k < K2:
                        if n0 + g < N:
                            load_words(wb, i, b, (n0 + g, k))
                        else:
                            for x in range(GROUP):
                                wb[i + x] = uint32(0)
                        if g < M:
                            load_words(wa, i, a, (g, k))
                        else:
                            for x in range(GROUP):
                                wa[i + x] = uint32(0)
                        if g + 8 < M:
                            load_words(wa8, i, a, (g + 8, k))
                        else:
                            for x in range(GROUP):
                                wa8[i + x] = uint32(0)
                    else:
                        for x in range(GROUP):
                            wb[i + x] = uint32(0)
                            wa[i + x] = uint32(0)
                            wa8[i + x] = uint32(0)
            for u in range(HEAD_UNROLL):
                for j in range(4):
                    i = u * 8 + 2 * j
                    c0, c1, c2, c3 = mma_bf16_16816(wa[i], wa8[i], wa[i + 1], wa8[i + 1],
                                                    wb[i], wb[i + 1], c0, c1, c2, c3)
        n = n0 + 2 * t
        if n < N:
            if g < M:
                store_float32(out, (g, n), c0)
            if g + 8 < M:
                store_float32(out, (g + 8, n), c2)
        if n + 1 < N:               # an odd N ends mid-pair
            if g < M:
                store_float32(out, (g, n + 1), c1)
            if g + 8 < M:
                store_float32(out, (g + 8, n + 1), c3)

    return skinny_mma_transposed_kernel


_F32, _BF16 = float32[:, ::1], uint16[:, ::1]
_DTYPES = (np.dtype(np.float32), np.dtype(np.uint16))
_PARTIAL, _TICKETS = float32[:, :, ::1], int32[::1]
_WORDS = uint32[:, ::1]
PTX_SIGNATURES = (
    # andrea-120m's decoding in bf16 (qkv and fc bf16, proj float32) on the tensor cores,
    # every batch size (the few rows' unroll and the many's); the CUDA cores' kernels in
    # float32 (rows that do not divide into groups too) and in a mix of bf16 and float32,
    # at the row bounds 16 and 4
    [(_skinny_mma_kernel(False, unroll), (out, out, _WORDS, _WORDS, int32, _PARTIAL,
                                          _TICKETS))
     for out in (_BF16, _F32) for unroll in (MMA_UNROLL, MMA_UNROLL_MANY)] +
    [(_skinny_mma_kernel(True, unroll), (_BF16, _BF16, _WORDS, _WORDS, int32, _PARTIAL,
                                         _TICKETS))
     for unroll in (MMA_UNROLL, MMA_UNROLL_MANY)] +
    [(_skinny_mma_transposed_kernel(), (_BF16, _WORDS, _WORDS))] +
    [(_skinny_kernel(16, GROUP, False), (_F32, _F32, _BF16, _BF16, int32, _PARTIAL,
                                         _TICKETS)),
     (_skinny_kernel(4, 1, False), (_F32, _F32, _F32, _F32, int32, _PARTIAL, _TICKETS)),
     (_skinny_kernel(4, GROUP, True), (_F32, _F32, _F32, _F32, int32, _PARTIAL, _TICKETS))] +
    [(_skinny_transposed_kernel(16, GROUP), (_BF16, _BF16, _F32))] +
    [(_skinny_transposed_kernel(4, width), (_F32, _F32, _F32)) for width in (1, GROUP)])


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
    if _on_tensor_cores(a, b, K, N, transpose_b):
        return _skinny_mma(out, a, b, transpose_b, gelu_pre, stream)
    if transpose_b:
        width = GROUP if K % GROUP == 0 and group_width(K, a, b) == GROUP else 1
        threads = WARPS * WARP
        grid = ceil_div(N, threads // WARP * COLUMNS_PER_WARP)
        _skinny_transposed_kernel(row_bound(M), width)[grid, threads, stream](out, a, b)
        return
    width = group_width(N, b)
    tiles = ceil_div(N, TILE)
    # splits of at least a row per lane's load in flight
    splits = max(1, min(ceil_div(TARGET_BLOCKS, tiles), K // (WARPS * UNROLL)))
    rows_per_split = ceil_div(K, splits) if K else 1
    splits = ceil_div(K, rows_per_split) if K else 1
    partial, tickets = _scratch(out, splits, tiles)
    pre = out if gelu_pre is None else gelu_pre
    kernel = _skinny_kernel(row_bound(M), width, gelu_pre is not None)
    kernel[(tiles, splits), WARPS * WARP, stream](out, pre, a, b, rows_per_split, partial,
                                                  tickets)


def _scratch(out, splits, tiles):
    """The (splits, M, N) partial sums and the tiles' tickets of a launch into out, kept
    with it (a captured graph holds their addresses)."""
    M, N = out.shape
    partial = kept_with(out, ("skinny", splits, M, N), lambda: cuda.device_array(
        (splits, M, N), np.float32))
    tickets = kept_with(out, ("skinny_tickets", tiles), lambda: cuda.to_device(
        np.zeros(tiles, np.int32)))
    return partial, tickets


def _on_tensor_cores(a, b, K, N, transpose_b):
    """Whether the mma kernels take the product: a and b bf16, rows read as words (K
    even; b (K, N): N a multiple of 8, b 16-byte aligned; b (N, K): K a multiple of 8,
    both 16-byte aligned)."""
    if not (TENSOR_CORES and is_bf16(a) and is_bf16(b) and K > 0
            and device_address(a) % 4 == 0):
        return False
    if transpose_b:
        return K % 8 == 0 and device_address(a) % 16 == 0 and device_address(b) % 16 == 0
    return K % 2 == 0 and N % 8 == 0 and device_address(b) % 16 == 0


def _skinny_mma(out, a, b, transpose_b, gelu_pre, stream):
    M, N = out.shape
    K = a.shape[1]
    a32, b32 = a.view(np.uint32), b.view(np.uint32)
    threads = WARPS * WARP
    if transpose_b:
        grid = ceil_div(N, WARPS * MMA_N)
        _skinny_mma_transposed_kernel()[grid, threads, stream](out, a32, b32)
        return
    tiles, k_blocks = ceil_div(N, MMA_COLUMNS), ceil_div(K, MMA_K)
    unroll = MMA_UNROLL if M < MANY_ROWS else MMA_UNROLL_MANY
    # splits of at least a k-block for each warp's loads in flight
    splits = max(1, min(ceil_div(TARGET_BLOCKS, tiles), ceil_div(k_blocks, WARPS * unroll)))
    per_split = ceil_div(k_blocks, splits)
    splits = ceil_div(k_blocks, per_split)
    partial, tickets = _scratch(out, splits, tiles)
    pre = out if gelu_pre is None else gelu_pre
    _skinny_mma_kernel(gelu_pre is not None, unroll)[(tiles, splits), threads, stream](
        out, pre, a32, b32, per_split, partial, tickets)
