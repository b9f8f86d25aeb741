"""The bf16 GEMM on Hopper's warpgroup MMA (sm_90a): a WgmmaTile's kernel.

The wgmma kernel (a WgmmaTile; docs/gemm-bf16.md), the default on Hopper: Hopper's
warpgroup MMA, which reads both operands straight from the swizzled shared-memory slabs
through matrix descriptors, fed by the bulk tensor copy engine. Each warpgroup of 128
threads owns 64 rows and every column of the block's tile, one wgmma m64n{cols}k16 per 16
of K, asynchronous. One thread asks the copy engine for each slab, stages - 1 steps
ahead, and the copies complete on mbarriers that the warpgroups wait on; the epilogue
lays the tile in shared memory and the same engine writes it out (or adds it: the
float32 gradients, split-K included). The slabs live in dynamic shared memory (more than
the 48 KiB a block may declare statically).
"""
import functools
from typing import NamedTuple

from numba import cuda, float32, int32, types, uint16, uint32, uint64

from .. import elementwise
from ..atoms import (bulk_commit, bulk_wait, bulk_wait_written, fence_barrier_init,
                     fence_proxy_async, fence_proxy_async_global, fence_tensor_map,
                     mbarrier_arrive_expect_tx, mbarrier_init, mbarrier_try_wait,
                     named_barrier, pack_bf16x2, shared_address, tma_add_2d, tma_load_2d,
                     tma_load_2d_multicast, tma_store_2d, warpgroup_commit, warpgroup_fence,
                     warpgroup_wait, wgmma_bf16)
from ..cache import jit
from ..common import ceil_div
from ..device import MMA_K, SIMULATOR, SWIZZLE_BYTES, WARPGROUP, swizzle
from ..layouts.fragments import accumulator_col, wgmma_accumulator_row
from ..layouts.tiles import PANEL, descriptor, paneled, wgmma_operand
from ..pipelines.tma import tma_pipeline
from ..precision import unpack_bf16x2
from .tiles import BF16_OUT, FOLD_STEPS, GROUP
from .tuning import FOLD_TILE, TALL_TILE, WIDE_TILE
from .turns import pass_turn, wait_turn


class Slabs(NamedTuple):
    """How a block's slabs of op(a) and op(b) lie in a stage (slabs): a's place of an
    element, each operand's descriptor fields and their advance per 16 of k, b's offset
    in the stage and the stage's size (bf16 elements), and load(bars, stage, smem, a, b,
    a_map, b_map, k0, m0, n0, rank), which issues the bulk copies of the slabs at K k0 of
    the tile at (m0, n0) into `stage`, their bytes announced on its mbarrier. In a cluster
    (of blocks on tiles down one column of out, which share their slabs of b) the block of
    rank `rank` copies its part of b into every block's stage; with none, rank is 0."""
    a_index: object
    a_fields: object
    a_step: int
    b_fields: object
    b_step: int
    a_size: int
    stage_size: int
    load: object


@functools.cache
def slabs(transpose_a, transpose_b, BM, BN, BK, stage_size, cluster=1):
    """The Slabs of a BM x BN tile's BK-deep steps, stages stage_size elements apart (the
    wgmma kernels', this one's and gemm.persistent's), in blocks of a cluster of
    `cluster` along M: each copies 1/cluster of b's slab, as whole panels (b (K, N)) or
    rows (b (N, K), then in boxes of BN / cluster rows), multicast."""
    # a slab is [BK][BM] (m-major) when a is (K, M), else [BM][BK]; b is [BK][BN]
    # (n-major) when (K, N), else [BN][BK]; each in the wgmma layout (tiles.paneled), which
    # is what the bulk tensor copy writes, one box per panel
    a_shape = (BK, BM) if transpose_a else (BM, BK)
    b_shape = (BN, BK) if transpose_b else (BK, BN)
    a_panels, b_panels = (ceil_div(shape[1], PANEL) for shape in (a_shape, b_shape))
    a_box, b_box = (shape[0] * min(shape[1], PANEL) for shape in (a_shape, b_shape))
    a_fields, a_step = wgmma_operand(*a_shape, k_is_row=transpose_a)
    b_fields, b_step = wgmma_operand(*b_shape, k_is_row=not transpose_b)
    a_size = BM * BK
    slab_bytes = 2 * (BM + BN) * BK
    if cluster > 1 and (b_panels if not transpose_b else BN) % cluster:
        raise ValueError(f"a b slab of {b_shape} shared by {cluster} blocks: it must part "
                         "into whole panels (b (K, N)) or rows (b (N, K))")
    b_part = b_panels // cluster if not transpose_b else BN // cluster  # a block's part
    everyone = (1 << cluster) - 1

    @cuda.jit(device=True, inline=True)
    def load(bars, stage, smem, a, b, a_map, b_map, k0, m0, n0, rank):
        # what the warpgroups wait for: one arrival, and the slab's bytes as they land
        # (in a cluster, the parts the other blocks copy count on it too)
        mbarrier_arrive_expect_tx(bars, stage, slab_bytes)
        base = int32(stage * stage_size)
        for p in range(a_panels):
            if transpose_a:
                tma_load_2d(smem, base + p * a_box, a, a_map, m0 + p * PANEL, k0, bars, stage)
            else:
                tma_load_2d(smem, base, a, a_map, k0, m0, bars, stage)
        if cluster == 1:
            for p in range(b_panels):
                if transpose_b:
                    tma_load_2d(smem, base + a_size, b, b_map, k0, n0, bars, stage)
                else:
                    tma_load_2d(smem, base + a_size + p * b_box, b, b_map, n0 + p * PANEL,
                                k0, bars, stage)
        elif transpose_b:
            tma_load_2d_multicast(smem, base + a_size + rank * b_part * BK, b, b_map, k0,
                                  n0 + rank * b_part, bars, stage, uint16(everyone))
        else:
            for q in range(b_part):
                p = rank * b_part + q
                tma_load_2d_multicast(smem, base + a_size + p * b_box, b, b_map,
                                      n0 + p * PANEL, k0, bars, stage, uint16(everyone))

    return Slabs(paneled(*a_shape), a_fields, a_step, b_fields, b_step, a_size, stage_size,
                 load)


@functools.cache
def wgmma_kernel(transpose_a, transpose_b, epilogue, fold, tile, biased=False):
    BM, BN, BK, STAGES, GROUPS = tile
    threads = tile.threads
    regs = BN // 2                                # accumulators per thread
    slab = slabs(transpose_a, transpose_b, BM, BN, BK, tile.stage_elements)
    a_index, a_fields, a_step, b_fields, b_step, a_size, stage_size, _ = slab
    mma = wgmma_bf16(BN, transpose_a, not transpose_b)
    fence, wait_all, wait_one = (warpgroup_fence(regs), warpgroup_wait(0, regs),
                                 warpgroup_wait(1, regs))
    # the epilogue: each warpgroup lays its 64 x BN of out in shared memory as boxes of
    # 64 x `panel` (128-byte rows at most, swizzled), which one thread then writes, or
    # adds (float32, "accumulate", "atomic" and "ordered" alike), into out by bulk tensor
    # copies ("ordered": each warpgroup's rows in the turn of its split, gemm.turns).
    # "gelu" lays the pre-activation there, then gelu of it one tile further on, and writes
    # both; "gelu_backward" first has the copy engine bring the tile of pre there, in the
    # same layout, replaces it by gelu' of it and multiplies the accumulators by that
    bf16_out = epilogue in BF16_OUT
    bias_slots = BN if biased else 1              # the tile's columns of the bias
    beyond = BM * BN                              # the second tile of "gelu"
    panel = min(BN, 64 if bf16_out else 32)
    chunk = 8 if bf16_out else 4                  # elements in 16 bytes
    js = panel // 8                               # pairs of 8 columns per box row
    rows_per_line, phases = swizzle(panel // chunk)
    store_box = (tma_add_2d if epilogue in ("accumulate", "atomic", "ordered")
                 else tma_store_2d)

    in_word = 2 if bf16_out else 1                # elements of out in 4 bytes

    @cuda.jit(device=True, inline=True)
    def place(base, swapped, h, j):
        """Where the epilogue lays a thread's pair j of row half h (see below), in 4-byte
        words (a bf16 pair's, or a float32's): base and swapped are the thread's, the rest
        constants of the unrolled loop. (In elements and halved, the signed 64-bit
        division took ~15 instructions a store: under ncu the epilogue was half of the LM
        head forward's instructions.)"""
        return int32(base + (h * 8 * panel + j // js * 64 * panel) // in_word
                     + ((8 * (j % js)) // in_word ^ swapped))

    gelu_of = elementwise.gelu if epilogue == "gelu" else elementwise.gelu_derivative
    batch = min(8, BN // 8)                       # pairs in flight in map_places
    batch_values = 2 * batch

    @cuda.jit(device=True, inline=True)
    def map_places(pairs, to, base, swapped):
        """pairs[to + q] = gelu (or gelu') of pairs[q], at every place q of this thread's
        pairs, `batch` pairs at a time: a batch's loads all come before its stores, which
        the compiler may not move loads across, so its GELUs overlap each other's latency
        (one pair at a time, the epilogue took longer than the tile's products)."""
        x = cuda.local.array(batch_values, float32)
        for h in range(2):
            for j in range(0, BN // 8, batch):
                for u in range(batch):
                    at = place(base, swapped, h, j + u)
                    x[2 * u], x[2 * u + 1] = unpack_bf16x2(pairs[at])
                for u in range(batch):
                    pairs[to + place(base, swapped, h, j + u)] = pack_bf16x2(
                        gelu_of(x[2 * u]), gelu_of(x[2 * u + 1]))

    @cuda.jit(device=True, inline=True)
    def copy_slab(bars, stage, step, operands):
        """The slabs of a and b of K step `step` (of this block's) into `stage`."""
        smem, a, b, a_map, b_map, first, m0, n0 = operands
        slab.load(bars, stage, smem, a, b, a_map, b_map, (first + step) * BK, m0, n0, 0)

    # the stages' barriers, then each warpgroup's 'pre landed' (the GELU backward's
    # epilogue)
    pipe = tma_pipeline(STAGES, GROUPS, copy_slab)
    PRE_LANDED = pipe.barriers
    BARRIERS = pipe.barriers + GROUPS

    @jit(**({} if SIMULATOR else {"launch_bounds": (threads, 1)}))
    def matmul_wgmma_kernel(out, pre, a, b, bias, turns, a_map, b_map, out_map, pre_map,
                            steps_per_split):
        # as matmul_bf16_kernel, but block (x, y, z) owns the tile (z * GROUP + x % GROUP,
        # y) of out and K steps x // GROUP * steps_per_split on: consecutive blocks take
        # GROUP tiles down a column of out (as block_tile orders them) with divisions by
        # a constant only (a 64-bit division by a variable is a call, and a call in the
        # kernel makes ptxas serialize every wgmma).
        #
        # Warpgroup w owns rows 64w.. of the tile. Slabs land by bulk tensor copies into
        # stage step % STAGES, which thread 0 issues STAGES - 1 steps ahead, into the
        # stage that every warpgroup has just released (pipelines.tma: thread 0 the
        # producer, the warpgroups the consumers). (No copying
        # warp beside them: ptxas allocates registers to a wgmma kernel's threads by the
        # warpgroup, and would hold every thread to the registers of 128 more, as
        # setmaxnreg, which would let a copying warpgroup give its registers to the
        # others, is ignored in the relocatable compilation that linking the kernel takes.)
        # The ordered epilogue's grid is (GROUP * tiles along N, groups of tiles along M,
        # splits): split z of every tile launches before split z + 1 of any, so where the
        # blocks take several waves a split's turn has mostly come by the time it ends
        # (gemm.turns); its unit is a warpgroup's rows of a tile.
        M, N = out.shape
        K = a.shape[0] if transpose_a else a.shape[1]
        if epilogue == "ordered":
            tile_m = cuda.blockIdx.y * GROUP + cuda.blockIdx.x % GROUP
            tile_n, tiles_n = cuda.blockIdx.x // GROUP, cuda.gridDim.x // GROUP
            split, splits = cuda.blockIdx.z, cuda.gridDim.z
        else:
            tile_m = cuda.blockIdx.z * GROUP + cuda.blockIdx.x % GROUP
            tile_n, tiles_n = cuda.blockIdx.y, cuda.gridDim.y
            split, splits = cuda.blockIdx.x // GROUP, cuda.gridDim.x // GROUP
        m0 = tile_m * BM
        n0 = tile_n * BN
        if m0 >= M:                          # past the last group's last tile
            return
        group = cuda.threadIdx.x // WARPGROUP
        first = split * steps_per_split
        steps = min((K + BK - 1) // BK - first, steps_per_split)

        bars = cuda.shared.array(BARRIERS, uint64)
        bias_tile = cuda.shared.array(bias_slots, float32)
        raw = cuda.shared.array(0, uint16)
        # the stages from the first 1024-byte boundary on (the launch gives one more KiB);
        # the epilogue's views of the same memory (dynamic shared arrays alias)
        start = int32((SWIZZLE_BYTES - shared_address(raw, 0) % SWIZZLE_BYTES)
                      % SWIZZLE_BYTES // 2)
        smem = raw[start:]
        pairs = cuda.shared.array(0, uint32)[start // 2:]
        floats = cuda.shared.array(0, float32)[start // 2:]
        if cuda.threadIdx.x == 0:
            pipe.init(bars)
            for g in range(GROUPS):
                mbarrier_init(bars, PRE_LANDED + g, 1)
            fence_barrier_init()
        cuda.syncthreads()

        operands = (smem, a, b, a_map, b_map, first, m0, n0)
        if cuda.threadIdx.x == 0:
            fence_tensor_map(a_map)
            fence_tensor_map(b_map)
            pipe.prologue(bars, steps, operands)
        if biased and first == 0:
            # the tile's bias into shared memory while the first slabs land: read from
            # global memory in the epilogue, each of a thread's 64 loads behind a branch
            # and waited on by its adds, it took ~3 us a tile (QKV's product 27% longer)
            for c in range(cuda.threadIdx.x, BN, threads):
                bias_tile[c] = bias[n0 + c] if n0 + c < N else float32(0.0)

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
            pipe.wait(bars, step)            # this step's slab has landed
            base = step % STAGES * stage_size
            a_desc = descriptor(smem, int32(base + a_at), a_fields)
            b_desc = descriptor(smem, int32(base + a_size), b_fields)
            fence(acc)
            for kk in range(BK // MMA_K):
                mma(smem, a_desc + uint64(kk * a_step), b_desc + uint64(kk * b_step), acc)
            warpgroup_commit()
            wait_one(acc)                    # this step's wgmma runs on, the last is done:
            if step > 0 and cuda.threadIdx.x % WARPGROUP == 0:     # release its stage
                pipe.release(bars, step - 1)
            # thread 0: into the stage released above, once all have
            pipe.refill(bars, step, steps, operands, cuda.threadIdx.x == 0)
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
                mbarrier_arrive_expect_tx(bars, PRE_LANDED + group, 2 * 64 * BN)
                for p in range(BN // panel):
                    tma_load_2d(smem, int32(group * 64 * BN + p * 64 * panel), pre, pre_map,
                                n0 + p * panel, row, bars, PRE_LANDED + group)
            while not mbarrier_try_wait(bars, PRE_LANDED + group, 0):
                pass
        # the thread holds, for each j, the pair at columns 8j + C, 8j + C + 1 of rows R
        # and R + 8; in the swizzled box a pair's place is a constant of j XOR-ed with a
        # constant of the thread (kept this simple so that the loop over the accumulators
        # unrolls and they stay in registers: GELU's arithmetic is in loops of its own,
        # over this thread's places in shared memory, which need not unroll)
        R, C = wgmma_accumulator_row(thread), accumulator_col(thread)
        swap = (C // chunk) ^ (R // rows_per_line % phases)
        swapped = swap * chunk // in_word       # (x ^ swap) * chunk, for x in chunks
        base = (group * 64 * BN + R * panel + C % chunk) // in_word
        if biased and first == 0:            # bias (N,) on every row, by the first K split
            for j in range(BN // 8):
                b_lo, b_hi = bias_tile[8 * j + C], bias_tile[8 * j + C + 1]
                for h in range(2):
                    r = 4 * j + 2 * h
                    if fold:
                        total[r] += b_lo
                        total[r + 1] += b_hi
                    else:
                        acc[r] += b_lo
                        acc[r + 1] += b_hi
        if epilogue == "gelu_backward":      # gelu'(pre) in place of pre, rounded to bf16,
            map_places(pairs, 0, base, swapped)  # then the accumulators times it
            for h in range(2):
                for j in range(BN // 8):
                    d_lo, d_hi = unpack_bf16x2(pairs[place(base, swapped, h, j)])
                    r = 4 * j + 2 * h
                    if fold:
                        total[r] *= d_lo
                        total[r + 1] *= d_hi
                    else:
                        acc[r] *= d_lo
                        acc[r + 1] *= d_hi
        for h in range(2):
            for j in range(BN // 8):
                at = place(base, swapped, h, j)
                r = 4 * j + 2 * h
                lo, hi = (total[r], total[r + 1]) if fold else (acc[r], acc[r + 1])
                if bf16_out:
                    pairs[at] = pack_bf16x2(lo, hi)
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
            map_places(pairs, beyond // 2, base, swapped)
            fence_proxy_async()
            named_barrier(2 + group, WARPGROUP)
        if thread == 0:
            # the ordered epilogue's unit: this warpgroup's rows of the tile
            unit = (tile_m * tiles_n + tile_n) * GROUPS + group
            if epilogue == "ordered":
                wait_turn(turns, unit, split)
                fence_proxy_async_global()   # the adds below after the ones before
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
            if epilogue == "ordered":
                bulk_wait_written()          # the adds have landed in out
                fence_proxy_async_global()
                pass_turn(turns, unit, split, splits)
            else:
                bulk_wait()                  # the block's shared memory is read

    return matmul_wgmma_kernel


@functools.cache
def signature(epilogue, a_layout="C", b_layout="C"):
    """The argument types of a launch: out and pre C-contiguous, a and b of their layouts
    ("C", or "A" for a view of some of a wider matrix's columns), the four tensor maps."""
    out = types.uint16[:, ::1] if epilogue in BF16_OUT else types.float32[:, ::1]
    a, b = (types.Array(types.uint16, 2, layout) for layout in (a_layout, b_layout))
    return ((out, out, a, b, types.float32[::1], types.int32[::1]) + (types.uint64[::1],) * 4
            + (types.int32,))


PTX_SIGNATURES = [
    (wgmma_kernel(ta, tb, epilogue, fold, tile), signature(epilogue, *layouts))
    for ta, tb, epilogue, fold, tile, layouts in [
        (False, False, "bf16", False, WIDE_TILE, ()),           # X @ W -> bf16
        (False, True, "float32", False, WIDE_TILE, ()),         # x @ wte^T
        (True, False, "atomic", False, WIDE_TILE, ()),          # dW += X^T @ dY, split K
        (False, False, "atomic", False, WIDE_TILE, ()),         # dx = dlogits @ wte
        (False, False, "bf16", True, FOLD_TILE, ()),            # the same, bf16 out
        (True, True, "accumulate", True, FOLD_TILE, ()),        # every flag flipped
        (False, False, "float32", False, WIDE_TILE, ()),
        (False, False, "float32", False, TALL_TILE, ()),        # long K: MLP down
        (False, True, "float32", False, TALL_TILE, ()),         # QKV and MLP up dX
        (True, False, "atomic", False, TALL_TILE, ()),          # their dW
        (True, False, "ordered", False, WIDE_TILE, ()),         # the same bits every run
        (True, False, "ordered", False, TALL_TILE, ()),
        (False, False, "ordered", False, TALL_TILE, ()),        # the LM head's dX
        (False, False, "atomic", False, TALL_TILE, ()),         # the LM head's dX
        (False, False, "gelu", False, WIDE_TILE, ()),           # the MLP's up projection
        (False, True, "gelu_backward", False, WIDE_TILE, ()),   # and its dX
        # a of a view of some of a wider matrix's columns (the GEMMs take views)
        (True, False, "atomic", False, TALL_TILE, ("A",)),
    ]
] + [   # a config with biases: X @ W + b into bf16, and into the MLP's GELU
    (wgmma_kernel(False, False, epilogue, False, WIDE_TILE, True), signature(epilogue))
    for epilogue in ("bf16", "gelu")]
