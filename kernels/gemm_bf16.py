"""bf16 GEMM on the tensor cores: out (M, N) = op(a) @ op(b), float32 accumulation.

NumPy twin: ``microgpt.reference.matmul_forward`` on the same bf16-rounded operands (the
float32 family of ``gemm`` is the other twin, and the ``--precision fp32`` path). The
operands are bf16 matrices held in uint16 device arrays (``ml_dtypes.bfloat16`` on the
host, viewed as uint16). The epilogue, what happens to each float32 result, is one of
EPILOGUES: written as float32, written as bf16 (an activation that feeds the next
matmul), or added into a float32 out (a weight gradient; "atomic" when split-K); or the
MLP's GELU around it (the wgmma kernel's): "gelu" writes the product (the pre-activation,
which the backward reads) to `pre` and gelu of it to out, "gelu_backward" writes the
product times gelu' of `pre`. These fold the two GELU kernels of ``elementwise`` into the
GEMMs around them, a pass over the (B*T, 4C) activations fewer each way; on the H200 they
measured slower than the GEMM and then the kernel, so the model's ops take them only when
``gemm.GELU_IN_EPILOGUE`` is on. Transposes and the epilogue are compile-time constants of
one kernel body.

How a block works: it owns a rows x cols tile of out, split among warps in warp_rows x
warp_cols pieces, each warp's accumulators in registers as a grid of 16 x 8 mma tiles.
It marches over K in steps of `depth`. Each step's slabs of op(a) (rows x depth) and op(b)
(depth x cols) go global -> shared by 16-byte cp.async into one of `stages` buffers, while
the mma.sync instructions work on a slab copied stages - 1 steps earlier: the copies of a
slab overlap the arithmetic of the ones before it. Fragments come out of the swizzled
slabs by ldmatrix (``tiles``), one barrier per step. Operands whose rows are not a whole
number of 16-byte chunks (a dimension not a multiple of 8) take element-wise copies
instead of cp.async; the arithmetic is the same.

Accumulation: the tensor cores' float32 accumulation truncates where IEEE addition
rounds, so its error grows with K in proportion rather than as a random walk (measured on
the H200, 512 x 512 products of random bf16: 3.2e-6 relative at K 3072, 1.9e-5 at 16384,
5.8e-5 at 50304; cuBLAS 3.2e-6, 4.4e-6, 6.9e-6). No chain of mma accumulation runs
longer than MAX_CHAIN of K: split-K shortens the weight gradients' chains, and a product
that still has a longer one folds its mma accumulators into float32 ones by plain addition
every FOLD_STEPS slabs; except that with a wgmma tile a float32 out (the LM head's dX,
K = V) is zeroed and summed by split-K too, which keeps a full tile (folding needs a
second set of accumulators, and so a tile of half the width).

The wgmma kernel (a WgmmaTile; docs/gemm-bf16.md), the default on Hopper: Hopper's
warpgroup MMA, which reads both operands straight from the swizzled shared-memory slabs
through matrix descriptors, fed by the bulk tensor copy engine. Each warpgroup of 128
threads owns 64 rows and every column of the block's tile, one wgmma m64n{cols}k16 per 16
of K, asynchronous. One thread asks the copy engine for each slab, stages - 1 steps
ahead, and the copies complete on mbarriers that the warpgroups wait on; the epilogue
lays the tile in shared memory and the same engine writes it out (or adds it: the
float32 gradients, split-K included). The slabs live in dynamic shared memory (more than
the 48 KiB a block may declare statically).

Split-K: the weight gradients (dW = X^T @ dY: K = B*T is long, M x N small) leave most of
the GPU idle with one block per output tile, so the launcher splits K over `split_k`
blocks per tile, each adding its partial sum into out with float32 atomics (accumulating
products only; the order of the additions then varies from run to run, by rounding).
"""
import functools
from typing import NamedTuple

import numpy as np
from numba import cuda, float32, int32, types, uint16, uint32, uint64

from microgpt.kernels import elementwise
from microgpt.kernels.common import (SIMULATOR, ceil_div, check_array, device_address,
                                     fill_zero)
from microgpt.kernels.mma import (CHUNK, MMA_K, MMA_M, MMA_N, SHARED_ALIGN, bulk_commit,
                                  bulk_wait, cp_async_commit, cp_async_wait_group,
                                  fence_barrier_init, fence_proxy_async, fence_tensor_map,
                                  mbarrier_arrive, mbarrier_arrive_expect_tx, mbarrier_init,
                                  mbarrier_try_wait, mma_bf16_16816, named_barrier,
                                  pack_bf16x2, shared_address, swizzle, tma_add_2d,
                                  tma_load_2d, tma_store_2d, to_bf16, warpgroup_commit,
                                  warpgroup_fence, warpgroup_wait, wgmma_bf16)
from microgpt.kernels.precision import unpack_bf16x2
from microgpt.kernels.tiles import (PANEL, a_fragment_loader, b_fragment_loader, descriptor,
                                    paneled, tensor_map, tile_copier, tma_ready,
                                    wgmma_operand)

EPILOGUES = ("float32", "bf16", "accumulate", "atomic", "gelu", "gelu_backward")
BF16_OUT = ("bf16", "gelu", "gelu_backward")
# static shared memory a block may declare without the driver's opt-in attribute
SHARED_LIMIT = 48 * 1024
# dynamic shared memory a block of an H200 may have with it (227 KiB)
DYNAMIC_SHARED_LIMIT = 227 * 1024
SWIZZLE_BYTES = 1024    # a wgmma operand starts on a whole swizzle pattern
WARPGROUP = 128
SMS = 132     # streaming multiprocessors of an H200: split-K aims to give each a block
GROUP = 8     # tiles of out down a column that consecutive blocks take (block_tile)
MAX_CHAIN = 4096   # K summed by the tensor cores' truncating accumulation, at most
FOLD_STEPS = 4     # slabs between folds of the mma accumulators, when folding
TALL_K = 2048      # the K from which a float32 out may take TALL_TILE on Hopper (default_tile)
# a TALL_TILE block's time over a WIDE_TILE block's on a long K: 1.38-1.47 over four
# andrea-120m products on the H200 (ms a wave of each, docs/gemm-bf16.md, row 13)
TALL_COST = 1.42


class MmaTile(NamedTuple):
    """A block's rows x cols of out, marched over K in steps of depth through `stages`
    shared buffers; each warp owns warp_rows x warp_cols of it. min_blocks > 1 caps the
    registers so that many blocks fit on an SM at once (CUDA's launch bounds)."""
    rows: int
    cols: int
    depth: int
    warp_rows: int
    warp_cols: int
    stages: int
    min_blocks: int = 1

    @property
    def threads(self):
        return (self.rows // self.warp_rows) * (self.cols // self.warp_cols) * 32

    @property
    def shared_bytes(self):
        return self.stages * (self.rows + self.cols) * self.depth * 2


class WgmmaTile(NamedTuple):
    """A block's rows x cols of out, in `warpgroups` of 128 threads that each own 64 rows
    and all the columns (one wgmma m64n{cols}k16 per 16 of k), marched over K in steps of
    depth through `stages` buffers of dynamic shared memory."""
    rows: int
    cols: int
    depth: int
    stages: int
    warpgroups: int

    @property
    def threads(self):
        return WARPGROUP * self.warpgroups

    @property
    def stage_elements(self):
        """bf16 elements from one stage's start to the next: the a slab, then the b slab,
        rounded up so that every slab starts on a swizzle pattern."""
        return -(-(self.rows + self.cols) * self.depth // (SWIZZLE_BYTES // 2)) * (
            SWIZZLE_BYTES // 2)

    @property
    def shared_bytes(self):
        # the stages, or the epilogue's float32 tile where that is more; and room to align
        # the start, which the launch does not promise beyond 16 bytes
        return (max(self.stages * self.stage_elements * 2, 4 * self.rows * self.cols)
                + SWIZZLE_BYTES)


def check_wgmma_tile(tile):
    rows, cols, depth, stages, warpgroups = tile
    if min(tile) < 1 or rows != 64 * warpgroups:
        raise ValueError(f"tile {tile}: rows must be 64 per warpgroup")
    if not (cols in (16, 32) or (cols % 64 == 0 and cols <= 256)):
        raise ValueError(f"tile {tile}: cols must be 16, 32, or a multiple of 64 up to 256 "
                         "(the wgmma n, and whole 128-byte swizzle panels)")
    if depth not in (16, 32, 64):
        raise ValueError(f"tile {tile}: depth must be 16, 32 or 64 (a swizzled row)")
    if stages < 3:
        raise ValueError(f"tile {tile}: the pipeline needs at least 3 stages (one slab "
                         "landing while the tensor cores work on two)")
    if tile.threads > 1024:
        raise ValueError(f"tile {tile}: {tile.threads} threads per block, more than 1024")
    if tile.shared_bytes > DYNAMIC_SHARED_LIMIT:
        raise ValueError(f"tile {tile}: {tile.shared_bytes} bytes of shared memory, more "
                         f"than {DYNAMIC_SHARED_LIMIT}")


def check_tile(tile):
    if isinstance(tile, WgmmaTile):
        return check_wgmma_tile(tile)
    rows, cols, depth, warp_rows, warp_cols, stages, _ = tile
    if min(tile) < 1 or rows % warp_rows or cols % warp_cols:
        raise ValueError(f"tile {tile}: rows and cols must be positive multiples of "
                         "warp_rows and warp_cols")
    if warp_rows % MMA_M or warp_cols % 16 or depth % MMA_K:
        raise ValueError(f"tile {tile}: warp_rows, warp_cols and depth must be multiples "
                         "of 16 (the mma and ldmatrix shapes)")
    if depth & (depth - 1):
        raise ValueError(f"tile {tile}: depth must be a power of two (the swizzled slabs)")
    if stages < 2:
        raise ValueError(f"tile {tile}: the pipeline needs at least 2 stages")
    if tile.threads > 1024:
        raise ValueError(f"tile {tile}: {tile.threads} threads per block, more than 1024")
    if tile.shared_bytes > SHARED_LIMIT:
        raise ValueError(f"tile {tile}: {tile.shared_bytes} bytes of shared memory, more "
                         f"than {SHARED_LIMIT}")


# Chosen by the sweep of tools/bench.py --gemm-sweep on the H200 (docs/gemm-bf16.md):
# 128 x 128 out per block in 4 warps of 64 x 64 (64 mma per slab per warp, for 16
# fragment loads), 32-deep slabs in 3 stages: 48 KiB
LARGE_TILE = MmaTile(128, 128, 32, 64, 64, 3)
# 64 x 64 in 4 warps of 32 x 32: four times the blocks, for outputs too small to fill the
# GPU with large ones, and for a short K (a block's fixed costs weigh more there)
SMALL_TILE = MmaTile(64, 64, 32, 32, 32, 4)
# 128 x 128 in 8 warps of 64 x 32: half the accumulators per thread of LARGE_TILE, which
# leaves registers for a second set when a long K is folded (see MAX_CHAIN)
LEAN_TILE = MmaTile(128, 128, 32, 64, 32, 3)


# wgmma (sm_90a): two warpgroups of m64n256, 128 x 256 out per block (128 accumulators
# per thread), 64-deep slabs in 4 stages: 193 KiB of shared memory, one block per SM
WIDE_TILE = WgmmaTile(128, 256, 64, 4, 2)
# 128 x 128: half the accumulators, which leaves registers for a second set when a long K
# is folded into a bf16 out (see MAX_CHAIN; a float32 one is split)
FOLD_TILE = WgmmaTile(128, 128, 64, 4, 2)
# three warpgroups, 192 x 256 (168 registers a thread, 4 stages in 225 KiB): half as many
# rows again per byte of b copied, for the products long enough in K that the slabs'
# traffic, not the fill and the epilogue, sets their pace (default_tile)
TALL_TILE = WgmmaTile(192, 256, 64, 4, 3)


def wgmma_available():
    """wgmma and the bulk tensor copies are sm_90a's: a device of compute capability 9.x
    (the simulator runs their twins, but only where a test names a wgmma tile)."""
    return not SIMULATOR and cuda.get_current_device().compute_capability[0] == 9


def wgmma_takes(*matrices):
    """Whether the default tile of a product of these matrices is a wgmma one: on sm_90a,
    with matrices the bulk tensor copies can move (tiles.tma_ready)."""
    return wgmma_available() and all(map(tma_ready, matrices))


def default_tile(M, N, K, accumulate=False, wgmma=False, bf16_out=False):
    """With wgmma (a Hopper GPU, and matrices the bulk tensor copies can move) the wide
    wgmma tile, or for a K too long for one chain that cannot be split (a bf16 out: a
    float32 one is split, see splits_written) the folding one. Otherwise the mma.sync
    tiles: the large tile for products with a K of at least 768 and either many output
    tiles or a long K to split (the weight gradients); the small one otherwise; the lean
    one to fold.

    On Hopper a float32 out (written, accumulated or split) of K at least TALL_K takes the
    tall tile where its waves of blocks, each TALL_COST times a wide block's time, take
    no longer than the wide tile's waves (each tile with its own split). On the H200
    (docs/gemm-bf16.md, tuning log row 13) it took the LM head's dX and dW 2.206 -> 2.080
    and 2.138 -> 1.967 ms, the MLP's dW 0.127 -> 0.119, and lost where K is 768 (the LM
    head forward 2.264 -> 2.422: the fill and the epilogue weigh more there) and on W_O's
    dW (768 x 768: 12 tall tiles split 11 ways fill one wave, as 18 wide ones in 7 do)."""
    folds = K > MAX_CHAIN and not accumulate
    if wgmma:
        if folds and bf16_out:
            return FOLD_TILE
        if bf16_out or K < TALL_K:
            return WIDE_TILE
        split = accumulate or folds        # (a float32 out of a long K is split too)
        tall, wide = (waves(M, N, K, tile, split) for tile in (TALL_TILE, WIDE_TILE))
        return TALL_TILE if TALL_COST * tall <= wide else WIDE_TILE
    if folds:
        return LEAN_TILE
    tiles = ceil_div(M, LARGE_TILE.rows) * ceil_div(N, LARGE_TILE.cols)
    return LARGE_TILE if K >= 768 and (tiles >= 4 * SMS or K >= 8192) else SMALL_TILE


def waves(M, N, K, tile, split):
    """Waves of one block an SM that a product's blocks take with a wgmma tile, split-K's
    default split or none."""
    blocks = ceil_div(M, tile.rows) * ceil_div(N, tile.cols)
    return ceil_div(blocks * (default_split_k(M, N, K, tile) if split else 1), SMS)


def splits_written(K, accumulate, bf16_out, tile, max_chain=MAX_CHAIN):
    """Whether a product that writes its float32 out with a wgmma tile and a K longer than
    one chain zeroes out and accumulates split-K's sums into it instead of folding,
    keeping a full tile: on the H200 the LM head's dX at andrea-120m (16384 x 768,
    K 50304) took 2.13 ms so with the wide tile, 2.83 with the folding one (docs/gemm-bf16.md,
    tuning log row 11), and 2.08 with the tall one (row 13)."""
    return (isinstance(tile, WgmmaTile) and not accumulate and not bf16_out
            and K > max_chain)


def default_split_k(M, N, K, tile, max_chain=MAX_CHAIN):
    """Blocks per output tile along K, each still with at least 16 slabs to pipeline, and
    enough that none sums more than max_chain of K. A wgmma tile takes a whole SM: as many
    as fill the SMs in one wave without starting a second; the small mma.sync tile about
    four per SM (what fits at once).

    Where a wgmma tile's blocks take more than one wave, a last wave mostly idle costs
    about a whole one: up to twice the splits (each block's share of K shorter) are taken
    for a last wave at least 7/8 full. On the H200 the MLP weight gradients at andrea-120m
    (72 tiles) took 0.1527 ms in 4 splits (288 blocks, 2.2 waves) and 0.1264 in 5 (2.7);
    QKV's (54 tiles) 0.1007 in 4 and 0.0986 in 7 (docs/gemm-bf16.md, tuning log row 12)."""
    tiles = ceil_div(M, tile.rows) * ceil_div(N, tile.cols)
    steps = ceil_div(K, tile.depth)
    fill = SMS // tiles if isinstance(tile, WgmmaTile) else ceil_div(4 * SMS, tiles)
    split = max(1, min(fill, steps // 16), ceil_div(K, max_chain))
    if isinstance(tile, WgmmaTile) and tiles * split > SMS:
        for more in range(split, min(2 * split, steps // 16) + 1):
            if 8 * tiles * more >= 7 * SMS * ceil_div(tiles * more, SMS):
                return more
    return split


def step_products(B, T, C, V):
    """(name, M, N, K, transpose_a, transpose_b, epilogue) of every GEMM of a training step
    of a GPT with B x T tokens, width C and vocabulary V (the tests' and the bench's list):
    forward, dX = dY @ W^T and dW += X^T @ dY (float32 gradient, split-K) of the QKV, W_O,
    MLP up and down projections, and the tied LM head, with the outs of the model's bf16
    step: bf16 where a matmul or attention reads the result next, float32 where it joins
    the residual stream (W_O's and MLP down's forward) or its gradient (the dX products
    that feed a LayerNorm's backward); the MLP up forward with the "gelu" epilogue and the
    MLP down dX with "gelu_backward", as the model runs them when GELU is in the
    epilogues."""
    N = B * T
    products = []
    for name, n_in, n_out, forward, dx in (("QKV", C, 3 * C, "bf16", "float32"),
                                           ("W_O", C, C, "float32", "bf16"),
                                           ("MLP up", C, 4 * C, "gelu", "float32"),
                                           ("MLP down", 4 * C, C, "float32", "gelu_backward")):
        products += [(f"{name} forward", N, n_out, n_in, False, False, forward),
                     (f"{name} dX", N, n_in, n_out, False, True, dx),
                     (f"{name} dW", n_in, n_out, N, True, False, "accumulate")]
    return products + [("LM head forward", N, V, C, False, True, "bf16"),
                       ("LM head dX", N, C, V, False, False, "float32"),
                       ("LM head dW", V, C, N, True, False, "accumulate")]


# ----------------------------------------------------------------------------------
# kernels

def _storer(epilogue):
    @cuda.jit(device=True, inline=True)
    def store(out, row, col, value):
        if epilogue == "atomic":
            cuda.atomic.add(out, (row, col), value)
        elif epilogue == "accumulate":
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
def _matmul_bf16_kernel(transpose_a, transpose_b, epilogue, aligned, fold, tile):
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
    wait_stages = cp_async_wait_group(STAGES - 2)

    @cuda.jit(device=True, inline=True)
    def copy_slab(a_smem, b_smem, a, b, stage, k0, m0, n0):
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

    store = _storer(epilogue)
    block_tile = _block_tiler(BM, BN)

    @cuda.jit(**({} if SIMULATOR else {"launch_bounds": (threads, MIN_BLOCKS)}))
    def matmul_bf16_kernel(out, a, b, steps_per_split):
        # out (M, N) float32 or bf16; a (M, K) or (K, M); b (K, N) or (N, K), bf16 as
        # uint16. Block (x, y, z) owns a tile of out (block_tile) and K steps
        # z*steps_per_split on.
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

        for s in range(STAGES - 1):          # the pipeline's prologue
            if s < steps:
                copy_slab(a_smem, b_smem, a, b, s, (first + s) * BK, m0, n0)
            cp_async_commit()
        for step in range(steps):
            wait_stages()                    # this step's slab has landed (own copies)
            cuda.syncthreads()               # everyone's have, and the previous is read
            ahead = step + STAGES - 1
            if ahead < steps:                # refill the buffer read in the previous step
                copy_slab(a_smem, b_smem, a, b, ahead % STAGES, (first + ahead) * BK, m0, n0)
            cp_async_commit()                # an empty group keeps the count uniform
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

        lane = cuda.threadIdx.x % 32
        for i in range(MT):
            for half in range(2):
                row = m0 + wm + i * MMA_M + lane // 4 + 8 * half
                if row < M:
                    for j in range(NT):
                        col = n0 + wn + j * MMA_N + 2 * (lane % 4)
                        if col < N:
                            store(out, row, col, acc[i, j, 2 * half])
                        if col + 1 < N:
                            store(out, row, col + 1, acc[i, j, 2 * half + 1])

    return matmul_bf16_kernel


@functools.cache
def _wgmma_kernel(transpose_a, transpose_b, epilogue, fold, tile):
    BM, BN, BK, STAGES, GROUPS = tile
    threads = tile.threads
    regs = BN // 2                                # accumulators per thread
    # a slab is [BK][BM] (m-major) when a is (K, M), else [BM][BK]; b is [BK][BN]
    # (n-major) when (K, N), else [BN][BK]; each in the wgmma layout (tiles.paneled), which
    # is what the bulk tensor copy writes, one box per panel
    a_shape = (BK, BM) if transpose_a else (BM, BK)
    b_shape = (BN, BK) if transpose_b else (BK, BN)
    a_index = paneled(*a_shape)
    a_panels, b_panels = (ceil_div(shape[1], PANEL) for shape in (a_shape, b_shape))
    a_box, b_box = (shape[0] * min(shape[1], PANEL) for shape in (a_shape, b_shape))
    a_fields, a_step = wgmma_operand(*a_shape, k_is_row=transpose_a)
    b_fields, b_step = wgmma_operand(*b_shape, k_is_row=not transpose_b)
    a_size, stage_size = BM * BK, tile.stage_elements
    slab_bytes = 2 * (BM + BN) * BK
    # each stage's 'landed' and 'released', and each warpgroup's 'pre landed' (the GELU
    # backward's epilogue)
    BARRIERS = 2 * STAGES + GROUPS
    mma = wgmma_bf16(BN, transpose_a, not transpose_b)
    fence, wait_all, wait_one = (warpgroup_fence(regs), warpgroup_wait(0, regs),
                                 warpgroup_wait(1, regs))
    # the epilogue: each warpgroup lays its 64 x BN of out in shared memory as boxes of
    # 64 x `panel` (128-byte rows at most, swizzled), which one thread then writes, or
    # adds (float32, "accumulate" and "atomic" alike), into out by bulk tensor copies.
    # "gelu" lays the pre-activation there, then gelu of it one tile further on, and writes
    # both; "gelu_backward" first has the copy engine bring the tile of pre there, in the
    # same layout, replaces it by gelu' of it and multiplies the accumulators by that
    bf16_out = epilogue in BF16_OUT
    beyond = BM * BN                              # the second tile of "gelu"
    panel = min(BN, 64 if bf16_out else 32)
    chunk = 8 if bf16_out else 4                  # elements in 16 bytes
    js = panel // 8                               # pairs of 8 columns per box row
    rows_per_line, phases = swizzle(panel // chunk)
    store_box = tma_add_2d if epilogue in ("accumulate", "atomic") else tma_store_2d

    @cuda.jit(device=True, inline=True)
    def place(base, swap, h, j):
        """Where the epilogue lays a thread's pair j of row half h (see below)."""
        return (base + h * 8 * panel + j // js * 64 * panel
                + (8 * (j % js) // chunk ^ swap) * chunk)

    gelu_of = elementwise.gelu if epilogue == "gelu" else elementwise.gelu_derivative
    batch = min(8, BN // 8)                       # pairs in flight in map_places
    batch_values = 2 * batch

    @cuda.jit(device=True, inline=True)
    def map_places(pairs, to, base, swap):
        """pairs[to + q] = gelu (or gelu') of pairs[q], at every place q of this thread's
        pairs, `batch` pairs at a time: a batch's loads all come before its stores, which
        the compiler may not move loads across, so its GELUs overlap each other's latency
        (one pair at a time, the epilogue took longer than the tile's products)."""
        x = cuda.local.array(batch_values, float32)
        for h in range(2):
            for j in range(0, BN // 8, batch):
                for u in range(batch):
                    at = place(base, swap, h, j + u) // 2
                    x[2 * u], x[2 * u + 1] = unpack_bf16x2(pairs[at])
                for u in range(batch):
                    pairs[to + place(base, swap, h, j + u) // 2] = pack_bf16x2(
                        gelu_of(x[2 * u]), gelu_of(x[2 * u + 1]))

    @cuda.jit(device=True, inline=True)
    def copy_slab(smem, a, b, a_map, b_map, bars, stage, k0, m0, n0):
        # what the warpgroups wait for: one arrival, and the slab's bytes as they land
        mbarrier_arrive_expect_tx(bars, stage, slab_bytes)
        base = int32(stage * stage_size)
        for p in range(a_panels):
            if transpose_a:
                tma_load_2d(smem, base + p * a_box, a, a_map, m0 + p * PANEL, k0, bars, stage)
            else:
                tma_load_2d(smem, base, a, a_map, k0, m0, bars, stage)
        for p in range(b_panels):
            if transpose_b:
                tma_load_2d(smem, base + a_size, b, b_map, k0, n0, bars, stage)
            else:
                tma_load_2d(smem, base + a_size + p * b_box, b, b_map, n0 + p * PANEL, k0,
                            bars, stage)

    @cuda.jit(**({} if SIMULATOR else {"launch_bounds": (threads, 1)}))
    def matmul_wgmma_kernel(out, pre, a, b, a_map, b_map, out_map, pre_map,
                            steps_per_split):
        # as matmul_bf16_kernel, but block (x, y, z) owns the tile (z * GROUP + x % GROUP,
        # y) of out and K steps x // GROUP * steps_per_split on: consecutive blocks take
        # GROUP tiles down a column of out (as block_tile orders them) with divisions by
        # a constant only (a 64-bit division by a variable is a call, and a call in the
        # kernel makes ptxas serialize every wgmma).
        #
        # Warpgroup w owns rows 64w.. of the tile. Slabs land by bulk tensor copies into
        # stage step % STAGES, which thread 0 issues STAGES - 1 steps ahead, into the
        # stage that every warpgroup has just released (barrier STAGES + stage); the
        # copies complete on barrier `stage`, which the warpgroups wait on. (No copying
        # warp beside them: ptxas allocates registers to a wgmma kernel's threads by the
        # warpgroup, and would hold every thread to the registers of 128 more, as
        # setmaxnreg, which would let a copying warpgroup give its registers to the
        # others, is ignored in the relocatable compilation that linking the kernel takes.)
        M, N = out.shape
        K = a.shape[0] if transpose_a else a.shape[1]
        m0 = (cuda.blockIdx.z * GROUP + cuda.blockIdx.x % GROUP) * BM
        n0 = cuda.blockIdx.y * BN
        if m0 >= M:                          # past the last group's last tile
            return
        group = cuda.threadIdx.x // WARPGROUP
        first = cuda.blockIdx.x // GROUP * steps_per_split
        steps = min((K + BK - 1) // BK - first, steps_per_split)

        bars = cuda.shared.array(BARRIERS, uint64)
        raw = cuda.shared.array(0, uint16)
        # the stages from the first 1024-byte boundary on (the launch gives one more KiB);
        # the epilogue's views of the same memory (dynamic shared arrays alias)
        start = int32((SWIZZLE_BYTES - shared_address(raw, 0) % SWIZZLE_BYTES)
                      % SWIZZLE_BYTES // 2)
        smem = raw[start:]
        pairs = cuda.shared.array(0, uint32)[start // 2:]
        floats = cuda.shared.array(0, float32)[start // 2:]
        if cuda.threadIdx.x == 0:
            for s in range(STAGES):
                mbarrier_init(bars, s, 1)
                mbarrier_init(bars, STAGES + s, GROUPS)
            for g in range(GROUPS):
                mbarrier_init(bars, 2 * STAGES + g, 1)
            fence_barrier_init()
        cuda.syncthreads()

        if cuda.threadIdx.x == 0:
            fence_tensor_map(a_map)
            fence_tensor_map(b_map)
            for ahead in range(min(STAGES - 1, steps)):
                copy_slab(smem, a, b, a_map, b_map, bars, ahead, (first + ahead) * BK, m0, n0)

        a_at = a_index(0, 64 * group) if transpose_a else a_index(64 * group, 0)
        acc = cuda.local.array(regs, float32)
        total = cuda.local.array(regs, float32)     # folded sums, when folding
        for r in range(regs):
            acc[r] = float32(0.0)
            total[r] = float32(0.0)
        # every block has a step (the launcher sees to it): a loop that may run none would
        # give ptxas a path on which the zeros above meet the wait below, and it would
        # serialize the wgmmas for it
        step = 0
        while True:
            stage = step % STAGES
            while not mbarrier_try_wait(bars, stage, step // STAGES % 2):
                pass                         # this step's slab has landed
            base = stage * stage_size
            a_desc = descriptor(smem, int32(base + a_at), a_fields)
            b_desc = descriptor(smem, int32(base + a_size), b_fields)
            fence(acc)
            for kk in range(BK // MMA_K):
                mma(smem, a_desc + uint64(kk * a_step), b_desc + uint64(kk * b_step), acc)
            warpgroup_commit()
            wait_one(acc)                    # this step's wgmma runs on, the last is done:
            if step > 0 and cuda.threadIdx.x % WARPGROUP == 0:     # release its stage
                mbarrier_arrive(bars, STAGES + (step - 1) % STAGES, 1)
            ahead = step + STAGES - 1
            if cuda.threadIdx.x == 0 and ahead < steps:
                stage = ahead % STAGES       # the one released above, once all have
                while not mbarrier_try_wait(bars, STAGES + stage, (ahead // STAGES + 1) % 2):
                    pass
                copy_slab(smem, a, b, a_map, b_map, bars, stage, (first + ahead) * BK, m0,
                          n0)
            step += 1
            if fold and (step % FOLD_STEPS == 0 or step == steps):
                wait_all(acc)
                for r in range(regs):
                    total[r] += acc[r]
                    acc[r] = float32(0.0)
            if step == steps:
                break
        wait_all(acc)

        cuda.syncthreads()                   # every warpgroup is done with the stages
        thread = cuda.threadIdx.x % WARPGROUP
        row = m0 + 64 * group
        if epilogue == "gelu_backward":
            if thread == 0:
                fence_tensor_map(pre_map)
                mbarrier_arrive_expect_tx(bars, 2 * STAGES + group, 2 * 64 * BN)
                for p in range(BN // panel):
                    tma_load_2d(smem, int32(group * 64 * BN + p * 64 * panel), pre, pre_map,
                                n0 + p * panel, row, bars, 2 * STAGES + group)
            while not mbarrier_try_wait(bars, 2 * STAGES + group, 0):
                pass
        # thread t of row group g holds, for each j, the pair at columns 8j + 2t, 8j + 2t + 1
        # of rows R and R + 8; in the swizzled box a pair's place is a constant of j
        # XOR-ed with a constant of the thread (kept this simple so that the loop over the
        # accumulators unrolls and they stay in registers: GELU's arithmetic is in loops of
        # its own, over this thread's places in shared memory, which need not unroll)
        R, t = 16 * (thread // 32) + thread % 32 // 4, thread % 4
        swap = (2 * t // chunk) ^ (R // rows_per_line % phases)
        base = group * 64 * BN + R * panel + 2 * t % chunk
        if epilogue == "gelu_backward":      # gelu'(pre) in place of pre, rounded to bf16,
            map_places(pairs, 0, base, swap)  # then the accumulators times it
            for h in range(2):
                for j in range(BN // 8):
                    d_lo, d_hi = unpack_bf16x2(pairs[place(base, swap, h, j) // 2])
                    r = 4 * j + 2 * h
                    if fold:
                        total[r] *= d_lo
                        total[r + 1] *= d_hi
                    else:
                        acc[r] *= d_lo
                        acc[r + 1] *= d_hi
        for h in range(2):
            for j in range(BN // 8):
                at = place(base, swap, h, j)
                r = 4 * j + 2 * h
                lo, hi = (total[r], total[r + 1]) if fold else (acc[r], acc[r + 1])
                if bf16_out:
                    pairs[at // 2] = pack_bf16x2(lo, hi)
                else:
                    floats[at] = lo
                    floats[at + 1] = hi
        fence_proxy_async()                  # visible to the copies, once all have written
        named_barrier(2 + group, WARPGROUP)
        if epilogue == "gelu":               # pre is written while gelu of it is computed
            if thread == 0:
                for p in range(BN // panel):
                    store_box(pre, pre_map, n0 + p * panel, row, smem,
                              int32(group * 64 * BN + p * 64 * panel))
                bulk_commit()
            map_places(pairs, beyond // 2, base, swap)
            fence_proxy_async()
            named_barrier(2 + group, WARPGROUP)
        if thread == 0:
            for p in range(BN // panel):
                at = int32(group * 64 * BN + p * 64 * panel)
                col = n0 + p * panel
                if epilogue == "gelu":
                    store_box(out, out_map, col, row, smem, beyond + at)
                elif bf16_out:
                    store_box(out, out_map, col, row, smem, at)
                else:
                    store_box(out, out_map, col, row, floats, at)
            bulk_commit()
            bulk_wait()                      # the block's shared memory is read

    return matmul_wgmma_kernel


def _signature(epilogue, tile, a_layout="C", b_layout="C"):
    """The argument types of a launch: out and pre C-contiguous, a and b of their layouts
    ("C", or "A" for a view of some of a wider matrix's columns)."""
    bf16 = types.uint16[:, ::1]
    out = bf16 if epilogue in BF16_OUT else types.float32[:, ::1]
    a, b = (types.Array(types.uint16, 2, layout) for layout in (a_layout, b_layout))
    if isinstance(tile, WgmmaTile):     # pre, then the four tensor maps
        return (out, out, a, b) + (types.uint64[::1],) * 4 + (types.int32,)
    return (out, a, b, types.int32)


def _kernel(transpose_a, transpose_b, epilogue, aligned, fold, tile):
    if isinstance(tile, WgmmaTile):     # the bulk tensor copy needs aligned rows
        return _wgmma_kernel(transpose_a, transpose_b, epilogue, fold, tile)
    return _matmul_bf16_kernel(transpose_a, transpose_b, epilogue, aligned, fold, tile)


PTX_SIGNATURES = [
    (_kernel(ta, tb, epilogue, aligned, fold, tile), _signature(epilogue, tile))
    for ta, tb, epilogue, aligned, fold, tile in [
        (False, False, "bf16", True, False, WIDE_TILE),           # X @ W -> bf16
        (False, True, "float32", True, False, WIDE_TILE),         # x @ wte^T
        (True, False, "atomic", True, False, WIDE_TILE),          # dW += X^T @ dY, split K
        (False, False, "atomic", True, False, WIDE_TILE),         # dx = dlogits @ wte
        (False, False, "bf16", True, True, FOLD_TILE),            # the same, bf16 out
        (True, True, "accumulate", True, True, FOLD_TILE),        # every flag flipped
        (False, False, "float32", True, False, WIDE_TILE),
        (False, False, "float32", True, False, TALL_TILE),        # long K: MLP down
        (False, True, "float32", True, False, TALL_TILE),         # QKV and MLP up dX
        (True, False, "atomic", True, False, TALL_TILE),          # their dW
        (False, False, "atomic", True, False, TALL_TILE),         # the LM head's dX
        (False, False, "gelu", True, False, WIDE_TILE),           # the MLP's up projection
        (False, True, "gelu_backward", True, False, WIDE_TILE),   # and its dX
        # the mma.sync kernel, for the tiles given explicitly (the sweep's)
        (False, False, "bf16", True, False, LARGE_TILE),
        (True, False, "atomic", True, False, SMALL_TILE),
        (True, True, "accumulate", True, True, LEAN_TILE),
        (False, False, "float32", False, False, SMALL_TILE),
    ]
] + [   # a of a view of some of a wider matrix's columns: the LM head's dW in row ranges
    (_kernel(True, False, "atomic", True, False, tile), _signature("atomic", tile, "A"))
    for tile in (TALL_TILE, SMALL_TILE)
]


_opted_in = set()


def _allow_dynamic_shared(kernel, epilogue, tile, layouts):
    """More than 48 KiB of dynamic shared memory needs the driver's opt-in attribute on the
    compiled kernel, which numba-cuda has no API for: set it through the driver bindings,
    once per overload (the layouts of a and b: a view compiles one of its own) and device,
    on the kernel (context-independent, what numba-cuda launches) and on its function in
    this context (what the launch resolves it to)."""
    size = tile.shared_bytes
    if SIMULATOR or size <= SHARED_LIMIT:
        return
    from numba.cuda.cudadrv.driver import binding, driver

    device = cuda.get_current_device().id
    key = (id(kernel), layouts, device)
    if key not in _opted_in:           # (looking up the overload costs more than a launch:
        compiled = kernel.compile(_signature(epilogue, tile, *layouts))       # once only)
        attribute = (binding.CUfunction_attribute
                     .CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)
        handle = compiled._codelibrary.get_cufunc().handle
        driver.cuKernelSetAttribute(attribute, size, handle, device)
        driver.cuFuncSetAttribute(driver.cuKernelGetFunction(handle), attribute, size)
        _opted_in.add(key)


# ----------------------------------------------------------------------------------
# launcher

def matmul_bf16(out, a, b, transpose_a=False, transpose_b=False, accumulate=False, *,
                gelu=None, pre=None, tile=None, split_k=None, max_chain=MAX_CHAIN,
                stream=0):
    """out (M, N) = op(a) @ op(b), op transposing when asked; += when accumulate.

    a is (M, K), or (K, M) when transpose_a; b is (K, N), or (N, K) when transpose_b; both
    bf16 in uint16 device arrays, each a matrix of its own or a view of some of a wider
    one's columns (its rows then lie further apart). out is float32, or bf16 (uint16,
    written only), C-contiguous.
    gelu="forward": pre (M, N) = op(a) @ op(b) and out = gelu(pre); gelu="backward":
    out = (op(a) @ op(b)) * gelu'(pre); out and pre bf16 (the MLP's GELU, see EPILOGUES: in
    the wgmma kernel's epilogue, so a wgmma tile, given or the default, and K > 0).
    tile (a WgmmaTile, or an MmaTile for the mma.sync kernel) and split_k (blocks along K,
    accumulating products only) override the shape-based defaults; max_chain (the most K
    the tensor cores sum in one chain: a longer K is split, or folded into float32) is
    there for the tests."""
    for name, arr in (("out", out), ("a", a), ("b", b)):
        if len(arr.shape) != 2:
            raise ValueError(f"{name}: expected a 2-D matrix, got shape {tuple(arr.shape)}")
    M, N = out.shape
    K = a.shape[0] if transpose_a else a.shape[1]
    out_bf16 = out.dtype == np.uint16
    if out_bf16 and accumulate:
        raise ValueError("out: a bf16 output is written, never accumulated into "
                         "(accumulate into a float32 array)")
    check_array("out", out, (M, N), np.uint16 if out_bf16 else np.float32)
    check_array("a", a, (K, M) if transpose_a else (M, K), np.uint16, strided=True)
    check_array("b", b, (N, K) if transpose_b else (K, N), np.uint16, strided=True)
    for name, arr in (("a", a), ("b", b)):
        if arr.size and arr.strides[1] != 2:
            raise ValueError(f"{name}: a row's elements must be adjacent (a matrix, or a view "
                             f"of some of a wider one's columns), got strides "
                             f"{tuple(arr.strides)}")
    if gelu not in (None, "forward", "backward"):
        raise ValueError(f"gelu={gelu!r}: must be None, 'forward' or 'backward'")
    if gelu is not None:
        if not out_bf16 or accumulate:
            raise ValueError("gelu: the GELU epilogues write a bf16 out (not float32, not "
                             "accumulated)")
        if pre is None:
            raise ValueError(f"gelu={gelu!r} needs pre, the pre-activation (M, N) bf16 array")
        check_array("pre", pre, (M, N), np.uint16)
    elif pre is not None:
        raise ValueError("pre: only the GELU epilogues take it (give gelu='forward' or "
                         "'backward')")
    pre = out if pre is None else pre       # the wgmma kernel's unread stand-in
    if tile is None:
        tile = default_tile(M, N, K, accumulate, wgmma_takes(out, pre, a, b), out_bf16)
    elif not isinstance(tile, WgmmaTile):
        tile = MmaTile(*tile)
    check_tile(tile)
    if isinstance(tile, WgmmaTile) and not all(map(tma_ready, (out, pre, a, b))):
        raise ValueError(f"tile {tile}: the bulk tensor copies need matrices whose rows are "
                         "whole 16-byte chunks (a multiple of 8 bf16 or 4 float32 columns) "
                         "starting 16-byte aligned; give an MmaTile, or none, for these")
    if split_k is not None and (split_k < 1 or (split_k > 1 and not accumulate)):
        raise ValueError(f"split_k={split_k}: must be 1, or more when accumulating")
    if M == 0 or N == 0:
        return
    if gelu is not None and (not isinstance(tile, WgmmaTile) or K == 0):
        # the mma.sync kernel stores from registers in a loop that must unroll, and GELU in
        # it kept the loop from unrolling (the accumulators went to local memory)
        raise ValueError(f"gelu={gelu!r}: the GELU epilogues are the wgmma kernel's, for a "
                         f"K of at least 1 (here tile {tuple(tile)}, K {K}); run the product "
                         "and then elementwise's GELU kernel, as gemm.matmul_gelu_* do")
    if K == 0 and isinstance(tile, WgmmaTile):
        tile = SMALL_TILE        # nothing to pipeline: the mma.sync kernel writes the zeros
    if split_k is None and splits_written(K, accumulate, out_bf16, tile, max_chain):
        fill_zero(out, stream)
        accumulate = True
    if split_k is None:
        split_k = default_split_k(M, N, K, tile, max_chain) if accumulate else 1
    steps_per_split = ceil_div(ceil_div(K, tile.depth), split_k)
    split_k = ceil_div(ceil_div(K, tile.depth), steps_per_split) if K else 1
    epilogue = ("gelu" if gelu == "forward" else "gelu_backward" if gelu == "backward"
                else "atomic" if split_k > 1 else "accumulate" if accumulate
                else "bf16" if out_bf16 else "float32")
    aligned = all(arr.shape[1] % CHUNK == 0 and arr.strides[0] % 16 == 0
                  and device_address(arr) % 16 == 0 for arr in (a, b))
    fold = steps_per_split * tile.depth > max_chain
    kernel = _kernel(bool(transpose_a), bool(transpose_b), epilogue, aligned, fold, tile)
    layouts = tuple("C" if arr.is_c_contiguous() else "A" for arr in (a, b))
    # an int32, as _signature says: the launch then runs the overload compiled for it
    # (a Python int would compile another, for int64, without the shared-memory opt-in)
    steps_per_split = np.int32(steps_per_split)
    if isinstance(tile, WgmmaTile):
        rows, cols, depth = tile.rows, tile.cols, tile.depth
        a_map = tensor_map(a, *((depth, min(rows, PANEL)) if transpose_a else (rows, depth)))
        b_map = tensor_map(b, *((cols, depth) if transpose_b else (depth, min(cols, PANEL))))
        out_map, pre_map = (tensor_map(arr, 64, min(cols, 64 if out_bf16 else 32))
                            for arr in (out, pre))
        grid = (GROUP * split_k, ceil_div(N, cols), ceil_div(M, GROUP * rows))
        _allow_dynamic_shared(kernel, epilogue, tile, layouts)
        kernel[grid, tile.threads, stream, tile.shared_bytes](
            out, pre, a, b, a_map, b_map, out_map, pre_map, steps_per_split)
    else:
        grid = (ceil_div(N, tile.cols), ceil_div(M, tile.rows), split_k)
        kernel[grid, tile.threads, stream](out, a, b, steps_per_split)
