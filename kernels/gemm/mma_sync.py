"""The bf16 GEMM on the mma.sync tensor cores (sm_80 and later): an MmaTile's kernel.

How a block works: it owns a rows x cols tile of out, split among warps in warp_rows x
warp_cols pieces, each warp's accumulators in registers as a grid of 16 x 8 mma tiles. It
marches over K in steps of `depth`. Each step's slabs of op(a) (rows x depth) and op(b)
(depth x cols) go global -> shared by 16-byte cp.async into one of `stages` buffers, while
the mma.sync instructions work on a slab copied stages - 1 steps earlier: the copies of a
slab overlap the arithmetic of the ones before it (``pipelines.multistage``, one barrier
per step). Fragments come out of the swizzled slabs by ldmatrix (``layouts.fragments``).
Operands whose rows are not a whole number of 16-byte chunks (a dimension not a multiple
of 8) take element-wise copies instead of cp.async; the arithmetic is the same.
"""
import functools

import numpy as np
from numba import cuda, float32, int32, types, uint16

from ..atoms import mma_bf16_16816, to_bf16
from ..cache import jit
from ..device import MMA_K, MMA_M, MMA_N, SHARED_ALIGN, SIMULATOR
from ..layouts.fragments import (a_fragment_loader, accumulator_col, accumulator_row,
                                 b_fragment_loader)
from ..layouts.tiles import tile_copier
from ..pipelines.multistage import multistage
from .tiles import BF16_OUT, FOLD_STEPS, GROUP
from .tuning import LARGE_TILE, LEAN_TILE, SMALL_TILE
from .turns import block_turns


def _storer(epilogue):
    adds = epilogue in ("accumulate", "ordered")    # (a constant: the branches fold)

    @cuda.jit(device=True, inline=True)
    def store(out, row, col, value):
        if epilogue == "atomic":
            cuda.atomic.add(out, (row, col), value)
        elif adds:
            out[row, col] += value
        elif epilogue == "float32":
            out[row, col] = value
        else:
            out[row, col] = to_bf16(value)
    return store


def _block_tiler(BM, BN):
    @cuda.jit(device=True, inline=True)
    def block_tile():
        """(m0, n0) of this block's tile. Consecutive blocks take GROUP tiles down a
        column of out before moving right, so the GROUP row slabs of a and the column slab
        of b they share stay in L2 (a launch in plain row order streams all of b, for the
        LM head 77 MB, once per row of tiles)."""
        tiles_m = cuda.gridDim.y
        pid = cuda.blockIdx.y * cuda.gridDim.x + cuda.blockIdx.x
        group, within = pid // (GROUP * cuda.gridDim.x), pid % (GROUP * cuda.gridDim.x)
        rows = min(tiles_m - group * GROUP, GROUP)
        return (group * GROUP + within % rows) * BM, (within // rows) * BN
    return block_tile

@functools.cache
def mma_sync_kernel(transpose_a, transpose_b, epilogue, aligned, fold, tile, biased=False):
    BM, BN, BK, WM, WN, STAGES, MIN_BLOCKS = tile
    threads = tile.threads
    warps_n = BN // WN
    MT, NT = WM // MMA_M, WN // MMA_N            # mma tiles per warp
    NT2 = NT // 2                                # B fragments come two tiles at a time
    # a slab is [BK][BM] (m-major) when a is (K, M), else [BM][BK]; b likewise
    a_cols, b_cols = (BM if transpose_a else BK), (BK if transpose_b else BN)
    a_size, b_size = BM * BK, BN * BK
    a_smem_size, b_smem_size = STAGES * a_size, STAGES * b_size
    copy_a = tile_copier(BK if transpose_a else BM, a_cols, threads, aligned)
    copy_b = tile_copier(BN if transpose_b else BK, b_cols, threads, aligned)
    locate_a, advance_a, load_a = a_fragment_loader(a_cols, transpose_a)
    locate_b, advance_b, load_b = b_fragment_loader(b_cols, transpose_b)

    @cuda.jit(device=True, inline=True)
    def copy_slab(stage, step, operands):
        """The slabs of a and b of K step `step` (of this block's) into buffer `stage`."""
        a_smem, b_smem, a, b, first, m0, n0 = operands
        k0 = (first + step) * BK
        # an operand's rows lie strides[0] apart: its own width, or more for a view of
        # some of a wider matrix's columns (matmul_bf16 takes both)
        a_pitch, b_pitch = a.strides[0] // 2, b.strides[0] // 2
        if transpose_a:
            copy_a(a_smem, stage * a_size, a, k0, m0, a_pitch)
        else:
            copy_a(a_smem, stage * a_size, a, m0, k0, a_pitch)
        if transpose_b:
            copy_b(b_smem, stage * b_size, b, n0, k0, b_pitch)
        else:
            copy_b(b_smem, stage * b_size, b, k0, n0, b_pitch)

    pipe = multistage(STAGES, copy_slab)
    store = _storer(epilogue)
    take_turn, give_turn = block_turns(epilogue == "ordered")
    block_tile = _block_tiler(BM, BN)

    @jit(**({} if SIMULATOR else {"launch_bounds": (threads, MIN_BLOCKS)}))
    def matmul_bf16_kernel(out, a, b, bias, turns, steps_per_split):
        # out (M, N) float32 or bf16; a (M, K) or (K, M); b (K, N) or (N, K), bf16 as
        # uint16; bias (N,) float32, added to every row when biased (by the blocks of
        # the first K steps alone), else not read; turns (tiles,) int32, the "ordered"
        # epilogue's (gemm.turns), else not read. Block (x, y, z) owns a tile of out
        # (block_tile) and K steps z*steps_per_split on.
        M, N = out.shape
        K = a.shape[0] if transpose_a else a.shape[1]
        m0, n0 = block_tile()
        warp = cuda.threadIdx.x // 32
        wm, wn = (warp // warps_n) * WM, (warp % warps_n) * WN
        first = cuda.blockIdx.z * steps_per_split
        steps = min((K + BK - 1) // BK - first, steps_per_split)

        a_smem = cuda.shared.array(a_smem_size, uint16, alignment=SHARED_ALIGN)
        b_smem = cuda.shared.array(b_smem_size, uint16, alignment=SHARED_ALIGN)
        acc = cuda.local.array((MT, NT, 4), float32)
        part = cuda.local.array((MT, NT, 4), float32)   # the mma's own, when folding
        mma_acc = part if fold else acc
        a_frag = cuda.local.array((MT, 4), np.uint32)
        b_frag = cuda.local.array((NT, 2), np.uint32)
        a_at = cuda.local.array(MT, np.int64)           # ldmatrix indices at k = 0
        b_at = cuda.local.array(NT2, np.int64)
        for i in range(MT):
            a_at[i] = locate_a(wm + i * MMA_M, 0)
        for j in range(NT2):
            b_at[j] = locate_b(0, wn + 2 * j * MMA_N)
        for i in range(MT):
            for j in range(NT):
                for r in range(4):
                    acc[i, j, r] = float32(0.0)
                    part[i, j, r] = float32(0.0)

        operands = (a_smem, b_smem, a, b, first, m0, n0)
        pipe.prologue(steps, operands)
        for step in range(steps):
            pipe.wait()
            pipe.refill(step, steps, operands)
            a_base, b_base = (step % STAGES) * a_size, (step % STAGES) * b_size
            for kk in range(0, BK, MMA_K):
                for i in range(MT):
                    a_frag[i, 0], a_frag[i, 1], a_frag[i, 2], a_frag[i, 3] = load_a(
                        a_smem, int32(a_base + advance_a(a_at[i], kk)))
                for j in range(NT2):
                    b_frag[2 * j, 0], b_frag[2 * j, 1], b_frag[2 * j + 1, 0], \
                        b_frag[2 * j + 1, 1] = load_b(b_smem,
                                                      int32(b_base + advance_b(b_at[j], kk)))
                for i in range(MT):
                    for j in range(NT):
                        mma_acc[i, j, 0], mma_acc[i, j, 1], mma_acc[i, j, 2], \
                            mma_acc[i, j, 3] = mma_bf16_16816(
                                a_frag[i, 0], a_frag[i, 1], a_frag[i, 2], a_frag[i, 3],
                                b_frag[j, 0], b_frag[j, 1], mma_acc[i, j, 0],
                                mma_acc[i, j, 1], mma_acc[i, j, 2], mma_acc[i, j, 3])
            if fold and ((step + 1) % FOLD_STEPS == 0 or step + 1 == steps):
                for i in range(MT):
                    for j in range(NT):
                        for r in range(4):
                            acc[i, j, r] += part[i, j, r]
                            part[i, j, r] = float32(0.0)

        row0 = m0 + wm + accumulator_row(cuda.threadIdx.x)
        col0 = n0 + wn + accumulator_col(cuda.threadIdx.x)
        if biased and first == 0:
            for j in range(NT):
                col = col0 + j * MMA_N
                lo = bias[col] if col < N else float32(0.0)
                hi = bias[col + 1] if col + 1 < N else float32(0.0)
                for i in range(MT):
                    for half in range(2):
                        acc[i, j, 2 * half] += lo
                        acc[i, j, 2 * half + 1] += hi
        unit = m0 // BM * cuda.gridDim.x + n0 // BN     # the tile's turn ("ordered")
        take_turn(turns, unit)
        for i in range(MT):
            for half in range(2):
                row = row0 + i * MMA_M + 8 * half
                if row < M:
                    for j in range(NT):
                        col = col0 + j * MMA_N
                        if col < N:
                            store(out, row, col, acc[i, j, 2 * half])
                        if col + 1 < N:
                            store(out, row, col + 1, acc[i, j, 2 * half + 1])
        give_turn(turns, unit)

    return matmul_bf16_kernel


@functools.cache
def signature(epilogue, a_layout="C", b_layout="C"):
    """The argument types of a launch: out C-contiguous, a and b of their layouts ("C",
    or "A" for a view of some of a wider matrix's columns)."""
    out = types.uint16[:, ::1] if epilogue in BF16_OUT else types.float32[:, ::1]
    a, b = (types.Array(types.uint16, 2, layout) for layout in (a_layout, b_layout))
    return (out, a, b, types.float32[::1], types.int32[::1], types.int32)


# the tiles given explicitly (the sweep's), and a of a view of some of a wider matrix's
# columns (the GEMMs take views)
PTX_SIGNATURES = [
    (mma_sync_kernel(ta, tb, epilogue, aligned, fold, tile), signature(epilogue, *layouts))
    for ta, tb, epilogue, aligned, fold, tile, layouts in [
        (False, False, "bf16", True, False, LARGE_TILE, ()),
        (True, False, "atomic", True, False, SMALL_TILE, ()),
        (True, False, "ordered", True, False, SMALL_TILE, ()),
        (True, True, "accumulate", True, True, LEAN_TILE, ()),
        (False, False, "float32", False, False, SMALL_TILE, ()),
        (True, False, "atomic", True, False, SMALL_TILE, ("A",)),
    ]
] + [   # a config with biases: X @ W + b, into bf16
    (mma_sync_kernel(False, False, "bf16", True, False, SMALL_TILE, True), signature("bf16"))]
# split-K's float atomics, which a deterministic backend's GEMMs never launch (its splits
# take the ordered epilogue): the listed kernel that adds by them (tests/test_compile.py)
FLOAT_ATOMICS = {mma_sync_kernel(True, False, "atomic", True, False, SMALL_TILE)}
