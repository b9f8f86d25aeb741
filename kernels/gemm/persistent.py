"""The persistent wgmma GEMM (sm_90a): one block an SM walking the output's tiles.

A PersistentTile's kernel (docs/gemm-bf16.md, "The persistent kernel"). Its block is the
wgmma kernel's (``gemm.wgmma``): warpgroups of 128 threads each owning 64 rows and all
the columns of a tile, slabs brought by the bulk tensor copies into a ring of stages
(``pipelines.tma``, thread 0 the producer). What differs is what a block does between
tiles. The wgmma kernel's block computes one tile and leaves: the next block on its SM
starts with an empty pipeline (the first slab's whole latency) and its SM idles through
the epilogue's stores. Here `min(tiles, SMS)` blocks walk the tiles in the wgmma kernel's
grouped order (GROUP tiles down a column, so the blocks at work at any time share their
slabs of a and b in the L2), and the ring runs on from one tile's K steps into the next
one's: the producer issues the next tile's first slabs during the last steps of this one,
so they have landed when its epilogue ends. The epilogue goes out through two buffers a
warpgroup, one box of out (64 rows x 128 bytes) each, which the copy engine reads while
the warpgroup lays the next box in the other; the stages stay the ring's.

Epilogues: "float32" and "bf16" (written), "accumulate" and "atomic" (added into a float32
out by the copy engine, a split of K each: the weight gradients, and a long K written
into a zeroed out), "ordered" (the same adds, each warpgroup's rows in the turn of its
split: ``gemm.turns``), "parts" (each split's part written into rows of its own of a
workspace, for ``turns.add_parts`` to add into out in the splits' order: no waits), each
with or without a bias (added by the first split); and "gelu"
(the MLP's up projection: the product, bf16, to `pre`, and gelu of it as stored to out).
A split is at most a chain of the tensor cores' accumulation (tuning.MAX_CHAIN): there
is no fold (session 21's, a second set of accumulators, was slower than the splits it
would have saved: docs/gemm-bf16.md, row 24).

"ordered" waits across blocks: an item waits for the split before it of its unit, an
item of lower index in the walk, which another block may hold at an earlier or the same
point of its walk. The blocks of a launch are one an SM, at most the SMs (blocks), so all
are resident once the kernels before it on the stream have ended, and the item of lowest
index not yet added can always add: none waits for ever.
"""
import functools

from numba import cuda, float32, int32, types, uint16, uint32, uint64

from .. import elementwise
from ..atoms import (bulk_commit, bulk_wait, bulk_wait_but_one, bulk_wait_written,
                     cluster_count, cluster_index,
                     cluster_rank, cluster_sync, fence_barrier_init,
                     fence_proxy_async, fence_proxy_async_global, fence_tensor_map,
                     named_barrier,
                     named_barrier_arrive, opaque, pack_bf16x2, rcp_approx,
                     set_max_registers, shared_address, tma_add_2d, tma_store_2d,
                     warpgroup_commit,
                     warpgroup_fence, warpgroup_wait, wgmma_bf16)
from ..cache import jit
from ..device import MMA_K, SIMULATOR, SMS, SWIZZLE_BYTES, WARPGROUP, swizzle
from ..layouts.fragments import accumulator_col, wgmma_accumulator_row
from ..layouts.tiles import descriptor
from ..pipelines.tma import tma_pipeline
from ..precision import unpack_bf16x2
from .tiles import BF16_OUT, GROUP
from .tuning import (CLUSTER_TILE, COPIER_TILE, NARROW_COPIER_TILE, PERSISTENT_TILE,
                     PINGPONG_TILE)
from .turns import pass_turn, wait_turn
from .wgmma import slabs

EPILOGUES = ("float32", "bf16", "accumulate", "atomic", "ordered", "parts", "gelu")
TURN = 4                  # the named barriers of the ping-pong's turns (2, 3: the epilogue's)
REGISTERS = 65536         # an SM's, which a block of one an SM holds
COPIER_REGISTERS = 40     # a thread of the copying warpgroup (CUTLASS's, for TMA issue)


def blocks(tiles):
    """Blocks of a launch (without clusters) over `tiles`: one an SM, or one a tile."""
    return min(tiles, SMS)


@cuda.jit(device=True, inline=True)
def quotient(n, d):
    """n // d for 0 <= n < 2^24 and d > 0, by a float32 reciprocal, corrected by one either
    way (rcp.approx errs by 2^-23): numba divides integers in 64 bits, and a 64-bit
    division by a variable is a call, which makes ptxas serialize a kernel's wgmmas."""
    q = int32(float32(n) * rcp_approx(float32(d)))
    if q * d > n:
        q -= 1
    elif (q + 1) * d <= n:
        q += 1
    return int32(q)


@functools.cache
def persistent_kernel(transpose_a, transpose_b, epilogue, tile, biased=False):
    if epilogue not in EPILOGUES:
        raise ValueError(f"epilogue {epilogue!r}: the persistent kernel writes {EPILOGUES}")
    BM, BN, BK, STAGES, GROUPS, CLUSTER, COPIER, PINGPONG = tile
    HALVES = BM // 64 if PINGPONG else 1          # m64 wgmmas a warpgroup's tile takes
    regs = BN // 2                                # accumulators per thread
    slab = slabs(transpose_a, transpose_b, BM, BN, BK, tile.stage_elements, CLUSTER)
    BAND = GROUP // CLUSTER                       # rows of the walk's units a band
    a_index, a_fields, a_step, b_fields, b_step, a_size, stage_size, _ = slab
    mma = wgmma_bf16(BN, transpose_a, not transpose_b)
    fence, wait_all, wait_one = (warpgroup_fence(regs), warpgroup_wait(0, regs),
                                 warpgroup_wait(1, regs))
    bf16_out = epilogue in BF16_OUT
    GELU = epilogue == "gelu"
    # a box of out: 64 rows of `panel` elements (at most 128 bytes), swizzled as the
    # copy engine reads it; each warpgroup's two buffers follow the stages ("gelu": the
    # first for the box of pre, the second for gelu of it)
    panel = min(BN, 64 if bf16_out else 32)
    chunk = 8 if bf16_out else 4                  # elements in 16 bytes
    js = panel // 8                               # pairs of 8 columns per box row
    rows_per_line, phases = swizzle(panel // chunk)
    store_box = tma_add_2d if epilogue in ("accumulate", "atomic", "ordered") else tma_store_2d
    ordered = epilogue == "ordered"
    PARTS = epilogue == "parts"
    # the ordered epilogue's units a tile: each warpgroup's 64 rows, or in ping-pong the
    # tile (one warpgroup's)
    UNIT_GROUPS = 1 if PINGPONG else GROUPS
    in_word = 2 if bf16_out else 1                # elements of out in 4 bytes
    buffers = STAGES * stage_size * 2             # the buffers' first byte
    box_bytes = tile.box_bytes
    mapped_to = box_bytes // 4 if GELU else 0     # (words: gelu's buffer, the next one)

    @cuda.jit(device=True, inline=True)
    def tile_origin(t, units_m, tiles_n, rank):
        """(m0, n0) of this block's tile of the t-th unit of the walk (a cluster's
        CLUSTER tiles down a column; a tile without a cluster): bands of GROUP rows of
        tiles, each taken a column of GROUP tiles at a time (the last band's columns as
        tall as it has rows)."""
        band = quotient(t, BAND * tiles_n)
        top = band * BAND
        rows = min(int32(BAND), units_m - top)
        r = t - band * (BAND * tiles_n)
        column = quotient(r, rows)
        return ((top + r - column * rows) * CLUSTER + rank) * BM, column * BN

    @cuda.jit(device=True, inline=True)
    def work(w, units_m, tiles_n, steps, rank):
        """(m0, n0, first K step) of the w-th item of the walk: split w // units of unit
        w % units (a split's units one after another, so that the blocks at work share
        the slabs of one range of K)."""
        units = units_m * tiles_n
        split = quotient(w, units)
        m0, n0 = tile_origin(w - split * units, units_m, tiles_n, rank)
        return m0, n0, split * steps

    @cuda.jit(device=True, inline=True)
    def fill(bars, stage, g, operands):
        """The slabs of this block's g-th K step (counted over all its items), g one more
        than the last call's: the producer's cursor (its item's end, origin and first K
        step less the item's first g) moves on once an item, so that the copying thread,
        a consumer's too, spends a few instructions a step on it."""
        (smem, a, b, a_map, b_map, steps, units_m, tiles_n, first, stride, rank,
         cursor) = operands
        if g == cursor[0]:                   # the first step of the next item
            item = quotient(g, steps)
            cursor[1], cursor[2], k_step = work(first + item * stride, units_m, tiles_n,
                                                steps, rank)
            cursor[3] = k_step - g
            cursor[0] = g + steps
        slab.load(bars, stage, smem, a, b, a_map, b_map, (cursor[3] + g) * BK, cursor[1],
                  cursor[2], rank)

    # (in ping-pong one warpgroup reads a stage)
    pipe = tma_pipeline(STAGES, 1 if PINGPONG else GROUPS, fill, CLUSTER)
    BARRIERS = pipe.barriers                      # (a constant for the shared array)
    # the block's registers (the launch bounds': 64K a block of one an SM, in steps of 8 a
    # thread) moved from the copier, which needs few, to the computing warpgroups
    share = REGISTERS // tile.threads // 8 * 8
    high = min(255, (share * (GROUPS + 1) - COPIER_REGISTERS) // GROUPS) // 8 * 8
    lower_registers, raise_registers = (set_max_registers(COPIER_REGISTERS, False),
                                        set_max_registers(high, True))

    @cuda.jit(device=True, inline=True)
    def box_word(words, place, swapped, h, q):
        """The 4-byte word of a thread's pair q of row half h in the box at `words`."""
        return int32(words + place + (h * 8 * panel) // in_word
                     + ((8 * q) // in_word ^ swapped))

    @cuda.jit(device=True, inline=True)
    def gelu_box(pairs, words, place, swapped):
        """gelu of the box of pre at `words` (as stored: rounded) into the next buffer, a
        pair of each row half at a time. The loop stays rolled (its count through a
        volatile mov): unrolled (the wgmma kernel's map_places, a row half's loads before
        its stores), it kept LLVM from unrolling the loop over the boxes around it, and
        the accumulators, indexed by that loop, went to local memory (512 bytes of
        stack, sm_90a)."""
        for q in range(opaque(int32(js))):
            lo, hi = (box_word(words, place, swapped, 0, q),
                      box_word(words, place, swapped, 1, q))
            x0, x1 = unpack_bf16x2(pairs[lo])
            y0, y1 = unpack_bf16x2(pairs[hi])
            pairs[lo + mapped_to] = pack_bf16x2(elementwise.gelu(x0), elementwise.gelu(x1))
            pairs[hi + mapped_to] = pack_bf16x2(elementwise.gelu(y0), elementwise.gelu(y1))

    BOXES = BN // panel           # of a warpgroup's 64 rows of a tile (bf16: at most 4)

    @cuda.jit(device=True, inline=True)
    def lay_box(p, out, pre, out_map, pre_map, pairs, floats, smem, bars, acc, row, n0,
                group, boxes, thread, place, swapped):
        """Box p of a warpgroup's 64 rows x BN of out from its accumulators, through the
        older of its two buffers once the copy engine has read it (the newer one's store
        may still be); "gelu": the product through the first buffer into pre (the newer
        store is then the previous box's gelu), and gelu of it through the second into
        out. -> its boxes written so far."""
        slot = 0 if GELU else boxes & 1
        words = int32((buffers + (2 * group + slot) * box_bytes) // 4)
        buffer = words * in_word                 # (in elements of out)
        col = n0 + p * panel
        if thread == 0:
            bulk_wait_but_one()
        named_barrier(2 + group, WARPGROUP)
        for h in range(2):
            for q in range(js):
                j = p * js + q
                r = 4 * j + 2 * h
                lo, hi = acc[r], acc[r + 1]
                at = box_word(words, place, swapped, h, q)
                if bf16_out:
                    pairs[at] = pack_bf16x2(lo, hi)
                else:
                    floats[at] = lo
                    floats[at + 1] = hi
        fence_proxy_async()                      # visible to the copy, once all have written
        named_barrier(2 + group, WARPGROUP)
        if thread == 0:
            if GELU:
                store_box(pre, pre_map, col, row, smem, buffer)
            elif bf16_out:
                store_box(out, out_map, col, row, smem, buffer)
            else:
                store_box(out, out_map, col, row, floats, buffer)
            bulk_commit()
        if GELU:
            if thread == 0:                      # the second buffer's last store has read it
                bulk_wait_but_one()
            named_barrier(2 + group, WARPGROUP)
            gelu_box(pairs, words, place, swapped)
            fence_proxy_async()
            named_barrier(2 + group, WARPGROUP)
            if thread == 0:
                store_box(out, out_map, col, row, smem, buffer + box_bytes // 2)
                bulk_commit()
        return boxes + 1

    @cuda.jit(device=True, inline=True)
    def lay_out(out, pre, bias, out_map, pre_map, pairs, floats, smem, bars, acc, row, n0,
                biased_here, group, boxes):
        """A warpgroup's 64 rows x BN of out from its accumulators (+ the bias), box by box
        (lay_box); -> its boxes written so far."""
        N = out.shape[1]
        thread = cuda.threadIdx.x % WARPGROUP
        # the thread's pairs in a box: a constant of the pair XOR-ed with a constant of the
        # thread (gemm.wgmma's epilogue), so that the loop over the accumulators unrolls
        R, C = wgmma_accumulator_row(thread), accumulator_col(thread)
        swap = (C // chunk) ^ (R // rows_per_line % phases)
        # in 4-byte words (a bf16 pair's, or a float32's: gemm.wgmma's place)
        swapped = swap * chunk // in_word       # (x ^ swap) * chunk, for x in chunks
        place = (R * panel + C % chunk) // in_word
        if biased and biased_here:           # bias (N,) on every row, by the first split
            for j in range(BN // 8):
                col = n0 + 8 * j + C
                b_lo = bias[col] if col < N else float32(0.0)
                b_hi = bias[col + 1] if col + 1 < N else float32(0.0)
                for h in range(2):
                    acc[4 * j + 2 * h] += b_lo
                    acc[4 * j + 2 * h + 1] += b_hi
        if GELU:
            # over a tuple of constants, which unrolls where a range with gelu_box's loop
            # inside did not (the accumulators it indexes then went to local memory: 512
            # bytes of stack, sm_90a)
            for p in (0, 1, 2, 3)[:BOXES]:
                boxes = lay_box(p, out, pre, out_map, pre_map, pairs, floats, smem, bars, acc,
                                row, n0, group, boxes, thread, place, swapped)
        else:
            for p in range(BOXES):
                boxes = lay_box(p, out, pre, out_map, pre_map, pairs, floats, smem, bars, acc,
                                row, n0, group, boxes, thread, place, swapped)
        return boxes

    @cuda.jit(device=True, inline=True)
    def consume(out, pre, bias, turns, out_map, pre_map, pairs, floats, bars, operands, items,
                total, splits, group):
        """A consumer warpgroup's walk: the products of each item's K steps, then its
        epilogue. Cooperative, each warpgroup has its 64 rows of every item's tile; in
        ping-pong, each has every other item, the whole of its tile (two halves of 64 rows
        where the tile has 128)."""
        smem, a, b, a_map, b_map, steps, units_m, tiles_n, first, stride, rank, _ = operands
        thread = cuda.threadIdx.x % WARPGROUP
        if thread == 0:                      # each warpgroup's thread 0 writes its rows
            fence_tensor_map(out_map)
            if GELU:
                fence_tensor_map(pre_map)

        top = 0 if PINGPONG else 64 * group  # the first of its rows in the tile
        a_at = a_index(0, top) if transpose_a else a_index(top, 0)
        a_below = a_index(0, top + 64) if transpose_a else a_index(top + 64, 0)
        acc = cuda.local.array(regs, float32)
        below = cuda.local.array(regs, float32)   # a ping-pong tile's rows 64-127
        boxes = int32(0)                     # this warpgroup's boxes written so far
        issued = min(int32(STAGES - 1), total)   # the slabs thread 0 has copied (prologue)
        item = int32(group if PINGPONG else 0)
        while item < items:
            g = item * steps                 # the item's first K step of the block's
            for r in range(regs):
                acc[r] = float32(0.0)
                if HALVES == 2:
                    below[r] = float32(0.0)
            if PINGPONG and item > 0:        # this one's turn of the tensor cores: the
                named_barrier(TURN + group, 2 * WARPGROUP)   # other's main loop is done
            # (a do-while, as gemm.wgmma's: no path from the zeros to a wait)
            s = int32(0)
            while True:
                if not COPIER and cuda.threadIdx.x == 0:    # thread 0 copies: this
                    # step's slab if not yet, and those whose stages are free (near a
                    # tile's end, the next tile's); the stage of g - 1 is in use still
                    issued = pipe.refill_ready(bars, g + 1, g + STAGES - 1, issued, total,
                                               operands)
                pipe.wait(bars, g)
                base = g % STAGES * stage_size
                a_desc = descriptor(smem, int32(base + a_at), a_fields)
                b_desc = descriptor(smem, int32(base + a_size), b_fields)
                fence(acc)
                if HALVES == 2:
                    a_desc2 = descriptor(smem, int32(base + a_below), a_fields)
                    fence(below)
                for kk in range(BK // MMA_K):
                    mma(smem, a_desc + uint64(kk * a_step), b_desc + uint64(kk * b_step),
                        acc)
                    if HALVES == 2:
                        mma(smem, a_desc2 + uint64(kk * a_step),
                            b_desc + uint64(kk * b_step), below)
                warpgroup_commit()
                wait_one(acc)
                if HALVES == 2:
                    wait_one(below)
                if s > 0 and thread == 0:
                    pipe.release(bars, g - 1)
                if not COPIER and cuda.threadIdx.x == 0:    # into the stage of g - 1
                    issued = pipe.refill_ready(bars, 0, g + STAGES, issued, total, operands)
                g += 1
                s += 1
                if s == steps:
                    break
            # the other's turn (its item's slabs come next in the ring): only from here may
            # it wait for them, no more than a lap of the ring ahead of the copies (a wait
            # two phases early would pass on a stale parity)
            if PINGPONG and item + 1 < items:
                named_barrier_arrive(TURN + 1 - group, 2 * WARPGROUP)
            wait_all(acc)
            if HALVES == 2:
                wait_all(below)
            if thread == 0:                  # the tile's last stage, free for the next's
                pipe.release(bars, g - 1)
            if not COPIER and cuda.threadIdx.x == 0:
                issued = pipe.refill_ready(bars, 0, g + STAGES, issued, total, operands)
            # (where, only now: fewer registers live through the products)
            w = first + item * stride
            m0, n0, k_step = work(w, units_m, tiles_n, steps, rank)
            if PARTS:                        # split z's rows of the workspace: z * rows
                m0 += quotient(w, units_m * tiles_n) * units_m * (CLUSTER * BM)
            if ordered:                      # this warpgroup's rows' turn (gemm.turns)
                units = units_m * tiles_n
                split = quotient(w, units)
                unit = (((w - split * units) * CLUSTER + rank) * UNIT_GROUPS
                        + (0 if PINGPONG else group))
                if thread == 0:
                    wait_turn(turns, unit, split)
                    fence_proxy_async_global()   # the adds below after the ones before
            boxes = lay_out(out, pre, bias, out_map, pre_map, pairs, floats, smem, bars,
                            acc, m0 + top, n0, k_step == 0, group, boxes)
            if HALVES == 2:
                boxes = lay_out(out, pre, bias, out_map, pre_map, pairs, floats, smem, bars,
                                below, m0 + top + 64, n0, k_step == 0, group, boxes)
            if ordered and thread == 0:
                bulk_wait_written()          # the adds have landed in out
                fence_proxy_async_global()
                pass_turn(turns, unit, split, splits)
            item += GROUPS if PINGPONG else 1
        if thread == 0:
            bulk_wait()                      # the block's shared memory is read

    @jit(**({} if SIMULATOR else {"launch_bounds": (tile.threads, 1)}))
    def matmul_persistent_kernel(out, pre, a, b, bias, turns, a_map, b_map, out_map, pre_map,
                                 tiles_m, tiles_n, splits, steps):
        # block (or cluster) x takes items x, x + gridDim.x (clusters), ... of the walk
        # (work: a unit of tile_origin's and a split of K, `steps` slabs long; the last
        # split's steps past K read zeros); its K steps are counted on over its items (g),
        # which is what the ring's stages and phases follow
        M, N = out.shape
        if CLUSTER == 1:
            first, stride, rank = int32(cuda.blockIdx.x), int32(cuda.gridDim.x), int32(0)
        else:
            first, stride, rank = cluster_index(), cluster_count(), cluster_rank()
        units_m = int32((tiles_m + CLUSTER - 1) // CLUSTER)
        items = quotient(units_m * tiles_n * splits - first + stride - 1, stride)  # >= 1
        total = items * steps
        group = cuda.threadIdx.x // WARPGROUP
        thread = cuda.threadIdx.x % WARPGROUP

        bars = cuda.shared.array(BARRIERS, uint64)
        raw = cuda.shared.array(0, uint16)
        start = int32((SWIZZLE_BYTES - shared_address(raw, 0) % SWIZZLE_BYTES)
                      % SWIZZLE_BYTES // 2)
        smem = raw[start:]
        pairs = cuda.shared.array(0, uint32)[start // 2:]
        floats = cuda.shared.array(0, float32)[start // 2:]
        if cuda.threadIdx.x == 0:
            pipe.init(bars)
            fence_barrier_init()
        if CLUSTER == 1:
            cuda.syncthreads()
        else:                                # every block's barriers, before any copy
            cluster_sync()
        cursor = cuda.local.array(4, int32)  # the producer's: see fill
        cursor[0] = 0
        operands = (smem, a, b, a_map, b_map, steps, units_m, tiles_n, first, stride, rank,
                    cursor)
        if not COPIER:
            if cuda.threadIdx.x == 0:
                fence_tensor_map(a_map)
                fence_tensor_map(b_map)
                pipe.prologue(bars, total, operands)
            consume(out, pre, bias, turns, out_map, pre_map, pairs, floats, bars, operands,
                    items, total, splits, group)
        elif group == GROUPS:                # the copier: its first thread copies every
            lower_registers()                # slab, each once its stage is released
            if thread == 0:
                fence_tensor_map(a_map)
                fence_tensor_map(b_map)
                pipe.refill_ready(bars, total, total, int32(0), total, operands)
        else:
            raise_registers()
            consume(out, pre, bias, turns, out_map, pre_map, pairs, floats, bars, operands,
                    items, total, splits, group)
        if CLUSTER > 1:                      # the others' last releases arrive here
            cluster_sync()

    # loaded by the driver's JIT, whole-program, where setmaxnreg moves registers
    matmul_persistent_kernel.whole_program = COPIER
    matmul_persistent_kernel.epilogue = epilogue     # (tests/test_compile.py reads it)
    return matmul_persistent_kernel


@functools.cache
def signature(epilogue, a_layout="C", b_layout="C"):
    """The argument types of a launch: out and pre (the "gelu" epilogue's, else unread)
    C-contiguous, a and b of their layouts ("C", or "A" for a view of some of a wider
    matrix's columns), the bias, the ordered epilogue's turns, four tensor maps (a's, b's,
    out's, pre's) and the tiles down and across out, the splits of K and the slabs of
    each."""
    out = types.uint16[:, ::1] if epilogue in BF16_OUT else types.float32[:, ::1]
    a, b = (types.Array(types.uint16, 2, layout) for layout in (a_layout, b_layout))
    return ((out, types.uint16[:, ::1], a, b, types.float32[::1], types.int32[::1])
            + (types.uint64[::1],) * 4
            + (types.int32,) * 4)


PTX_SIGNATURES = [
    (persistent_kernel(ta, tb, epilogue, tile, biased), signature(epilogue))
    for ta, tb, epilogue, biased, tile in [
        (False, False, "bf16", False, PERSISTENT_TILE),     # X @ W -> bf16 (QKV, MLP up)
        (False, True, "bf16", False, PERSISTENT_TILE),      # x @ wte^T (the LM head)
        (False, False, "float32", False, PERSISTENT_TILE),  # W_O, MLP down forward
        (False, True, "bf16", True, PERSISTENT_TILE),       # a biased dX
        (True, False, "atomic", False, PERSISTENT_TILE),    # dW +=, split K
        (False, False, "atomic", False, CLUSTER_TILE),      # dx = dlogits @ wte, split K
        (True, False, "atomic", False, CLUSTER_TILE),
        (False, False, "bf16", False, CLUSTER_TILE),
        (False, True, "bf16", False, CLUSTER_TILE),
        (False, True, "float32", False, CLUSTER_TILE),
        (False, False, "bf16", False, COPIER_TILE),         # (whole-program: ptxas)
        (False, False, "gelu", False, COPIER_TILE),         # the MLP's up projection
        (False, True, "float32", False, COPIER_TILE),
        (False, False, "bf16", True, PINGPONG_TILE),
        (True, False, "atomic", False, PINGPONG_TILE),
        (True, False, "ordered", False, COPIER_TILE),       # dW += in the splits' order
        (True, False, "ordered", False, PINGPONG_TILE),
        (False, False, "ordered", False, COPIER_TILE),      # the LM head's dX, K = V
        (True, False, "parts", False, PINGPONG_TILE),       # dW's parts (ordered_by_parts)
        (False, True, "float32", False, NARROW_COPIER_TILE),   # andrea-12m's N 384: dX
        (False, True, "bf16", False, NARROW_COPIER_TILE),      # W_O's dX
        (False, False, "float32", False, NARROW_COPIER_TILE),  # MLP down, the LM head's dX
        (True, False, "atomic", False, NARROW_COPIER_TILE),    # dW: split_slabs
    ]
]
