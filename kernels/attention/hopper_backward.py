"""Flash attention's backward on Hopper's warpgroup MMA (sm_90a), head_dim 64 and 128: a dq
pass by query tiles (which also writes delta = rowsum(dout * out)), then a dk/dv pass by
key tiles, in the manner of FlashAttention-3's backward. Every gradient element has one
owner (no atomics): the backward is deterministic. (Not so a dk/dv tile's fold, a variant
no default takes: that pass computes dq too, by bulk tensor adds into a float32 sum, whose
order the blocks' timing picks; BackwardTile's docstring.)

NumPy twin: ``microgpt.reference.attention_backward`` on the same bf16 inputs, as for
``flash`` (whose arguments, lse convention and tolerances this backward keeps).

How a block works (docs/flash-attention.md, "The wgmma backward"). A block owns `rows` =
64 x warpgroups rows of one (batch, head), each warpgroup 64 of them; the bulk copies
bring its two resident tiles into shared memory once and the other side's rows, `step`
at a time, into `stages` buffers (pipelines.tma; the first warpgroup's thread 0 issues the
copies, each step's a step or more ahead, or a producer warp of its own does, and every
warpgroup releases every step).

dq pass    resident q and dout, streamed k and v (the forward's walk: the key steps to
           the diagonal). Per step S = q k^T and dP = dout v^T by wgmma from shared
           memory (both K-major), P = exp2(S scale - lse) and dS = P (dP - delta) in the
           accumulators (lse and delta of the thread's two rows in registers), and
           dq += dS k with dS, rounded to bf16 pairs in place, as the register A operand
           (``atoms.wgmma_bf16_rs``; k read MN-major).
dk/dv pass resident k and v, streamed q and dout with each step's lse and delta (a one-row
           box of each, from the (B, H, T) arrays read as one row of B H T floats: a box
           past a head's T reads the next head's, masked): the query steps from the one
           holding the block's first key to T. Per step the transposed products S^T =
           k q^T and dP^T = v dout^T, so that P^T and dS^T lie in the accumulators as the
           rows of the warpgroup's keys: the register A operand of dv += P^T dout and
           dk += dS^T q (dout and q read MN-major).
The products of a step are issued as their operands are ready and waited for only when
their registers are needed: the two score-like products together, the exponentials while
the second runs, dS (dk/dv pass: while dv's product runs), the next step's scores before
this step's last product is waited for. A warpgroup waits for and releases the steps
wholly past its rows; the step that crosses the diagonal and the one past T are masked
element by element; rows past T are computed from what the boxes read there and never
written.
"""
import functools
import math
from typing import NamedTuple

import numpy as np
from numba import cuda, float32, int32, types, uint16, uint32, uint64

from ..atoms import (bulk_commit, bulk_wait, exp2_ftz, fence_barrier_init, fence_proxy_async,
                     fence_tensor_map, load_group4, mbarrier_arrive_expect_tx, mbarrier_init,
                     mbarrier_try_wait, named_barrier, pack_bf16x2, set_max_registers,
                     shared_address, store_pair, tma_add_2d, tma_load_2d, warp_uniform,
                     warpgroup_wait)
from ..cache import jit
from ..common import ceil_div, device_address
from ..device import (DYNAMIC_SHARED_LIMIT, GROUP, SIMULATOR, SWIZZLE_BYTES, WARPGROUP,
                      check_block, swizzle)
from ..layouts.fragments import accumulator_col, wgmma_accumulator_row
from ..layouts.tensor_maps import tensor_map
from ..layouts.tiles import PANEL, swizzled
from ..pipelines.tma import tma_pipeline
from . import flash, flash_backward
from .flash import INF, quad_sum
from .hopper import LOG2E, PRODUCER_REGISTERS, WIDTHS, ZERO, consumer_registers
from .hopper_operands import (causal_mask, described_heads, fold_product, head_matrix,
                              launch_pass, pair_copier, products)

STATS = 2                   # float32 statistics a query row brings: lse, delta
DKDV_REGISTERS = 170        # a dk/dv pass's thread needs about this many not to spill
# A bulk copy's first element must lie on a 16-byte boundary in global memory (the H200
# raises an illegal instruction otherwise: session 21, heads whose statistics start at
# (b H + h) T, not a multiple of 4), and its box 128-byte aligned in shared memory (a
# misaligned address otherwise: session 21's call C): a step's box of a statistic starts
# at the boundary at or before its first query, STAT_PAD floats wider, in a slot of
# stat_slot(step) floats, and is read from that query on
STAT_PAD = 4


def stat_slot(step):
    """The floats of shared memory a statistic's box of step + STAT_PAD takes: 128-byte
    slots."""
    return ceil_div(4 * (step + STAT_PAD), 128) * 32


class BackwardTile(NamedTuple):
    """warpgroups: of 128 threads, each owning 64 rows (queries in the dq pass, keys in the
    dk/dv pass); step: rows of the other side per stage (32 or 64: the accumulators of the
    two score-like products, 2 x step / 2 registers, beside the D / 2 of each gradient);
    stages: shared buffers of steps (4 or 8: the copies run stages - 2 steps ahead, as
    far as both warpgroups have released their buffers);
    min_blocks: blocks per SM the register allocation must leave room for;
    producer: a warp of its own issues the copies, each as soon as its stage is released
    (else the first warpgroup's thread 0, between its products, as far as the others'
    releases let it without waiting);
    donate (with producer): that warp is the first of a warpgroup of its own, which hands
    its registers to the computing ones by setmaxnreg (hopper.consumer_registers: 240 a
    thread for two), FlashAttention-3's layout, launched by the driver's whole-program JIT
    (the only compile that honours setmaxnreg), as the forward's donating tiles;
    fold (a dk/dv tile's, D 64 and step 64; no default has it): that pass computes dq too, as
    FlashAttention-3 does, and no dq pass runs. Per step each warpgroup stores dS (its 64
    keys x the step's queries, bf16) in shared memory, forms dq's part, dS k (64 x D
    float32 by wgmma, both operands from shared memory), stores it in shared memory and
    adds it into a float32 sum in global memory by bulk tensor adds; a row pass writes
    delta and zeroes the sum before, another rounds the sum into dq after. Five products
    a step where the two passes take seven."""
    warpgroups: int = 2
    step: int = 64
    stages: int = 4
    min_blocks: int = 1
    producer: bool = False
    donate: bool = False
    fold: bool = False

    @property
    def rows(self):
        return 64 * self.warpgroups

    @property
    def threads(self):
        return (WARPGROUP * self.warpgroups
                + (WARPGROUP if self.donate else 32 if self.producer else 0))


def default_tile(D, kind):
    """The tile of the dq or the dk/dv pass (kind "dq", "dkdv"): the fastest measured on the
    H200 (docs/flash-attention.md). At D 64 the dq pass with a producer warp, two
    warpgroups and 8 stages (session 21 call B: 0.312 against 0.327 ms at andrea-120m with
    one warpgroup of 64 queries, steps of 32 keys, three blocks an SM); every other pass
    with a producer warpgroup that donates its registers: the dk/dv pass (2, 64, 8) at
    D 64 and (2, 32, 4) at D 128, the dq pass (2, 64, 4) at D 128 (session 24's sweep:
    the dk/dv pass 0.3123 -> 0.2759 ms at andrea-120m; as routed, session 27's call 1: the
    backward 0.3056 -> 0.2812 ms at andrea-120m, 1.3834 -> 1.0285 at D 128, 0.9259 -> 0.7833
    at T 4096). (The simulator's: one warpgroup, whose 128 Python threads are a block's
    cost.)"""
    if SIMULATOR:
        return BackwardTile(1, 64, 4)
    if kind == "dq":
        return (BackwardTile(2, 64, 8, 1, True) if D == 64
                else BackwardTile(2, 64, 4, 1, True, True))
    return (BackwardTile(2, 64, 8, 1, True, True) if D == 64
            else BackwardTile(2, 32, 4, 1, True, True))


def shared_bytes(tile, D, kind):
    """The resident tiles (q and dout, or k and v), the stages of the streamed ones (with
    the queries' statistics in the dk/dv pass; a fold's buffers after them), and room to
    align the start to a swizzle pattern."""
    stats = 4 * STATS * tile.stages * stat_slot(tile.step) if kind == "dkdv" else 0
    end = 2 * D * (2 * tile.rows + 2 * tile.stages * tile.step) + stats
    if kind == "dkdv" and tile.fold:
        end = fold_bytes(end) + tile.warpgroups * fold_group_bytes(D)
    return end + SWIZZLE_BYTES


# a fold's buffers, each warpgroup's: dS (64 keys x 64 queries, bf16, the A operand of dq's
# part: 128-byte rows, swizzled), then that part (64 queries x D float32) as the boxes the
# bulk adds read, FOLD_BOX columns wide (128-byte rows, swizzled: a box 1024-byte aligned)
FOLD_BOX = 32


def fold_bytes(end):
    """The first byte of a fold's buffers: the end of the others, at a swizzle pattern."""
    return ceil_div(end, SWIZZLE_BYTES) * SWIZZLE_BYTES


def fold_group_bytes(D):
    return 2 * 64 * 64 + 4 * 64 * D


def check_tile(tile, D, kind):
    warpgroups, step, stages, min_blocks, producer, donate, fold = tile
    if D not in WIDTHS:
        raise ValueError(f"head_dim {D}: the wgmma backward takes {WIDTHS}")
    if not 1 <= warpgroups <= 2:
        raise ValueError(f"tile {tile}: 1 or 2 warpgroups")
    if step not in (32, 64):
        raise ValueError(f"tile {tile}: step must be 32 or 64 rows")
    if stages not in (4, 8):
        raise ValueError(f"tile {tile}: stages must be 4 or 8 (a power of two: a step's "
                         "stage is a mask of its count)")
    if not 1 <= min_blocks <= 3:
        raise ValueError(f"tile {tile}: min_blocks must be 1 to 3")
    if donate and not producer:
        raise ValueError(f"tile {tile}: donate hands a producer warpgroup's registers on")
    if fold and (kind != "dkdv" or step != 64 or D != 64):
        # at D 128 dq's part (64 accumulators a thread) beside dk's and dv's spills (sm_90a:
        # 255 registers and 184 bytes of stack with one warpgroup, session 28)
        raise ValueError(f"tile {tile}: a fold is the dk/dv pass's at head_dim 64, with "
                         "steps of 64 queries (the M of dq's wgmma)")
    if producer and SIMULATOR:
        # its thread spins on the barriers while the simulator's twins of the consumers'
        # warp-collective atoms wait for every live thread of the block
        raise ValueError(f"tile {tile}: a producer warp runs on the GPU only")
    # the dk/dv pass holds two gradients' accumulators: where ptxas leaves a thread fewer
    # than ~170 registers (a producer warp's 9 warps count as 12; two blocks of two
    # warpgroups) it spills and serializes the wgmma (sm_90a), and on the H200 the GPU
    # tests that drew such tiles died of an illegal instruction in this pass (session 20);
    # a donating producer warpgroup leaves the computing ones hopper.consumer_registers
    # (240 for two, 232 for one in each of two blocks an SM)
    if kind == "dkdv" and (producer and not donate or (
            consumer_registers(tile) < DKDV_REGISTERS if donate
            else tile.threads * min_blocks > 3 * WARPGROUP)):
        raise ValueError(f"tile {tile}: the dk/dv pass takes neither a producer warp that "
                         "does not donate nor more than 384 threads an SM, nor a donating "
                         f"one that leaves fewer than {DKDV_REGISTERS} registers a thread "
                         "(its registers would spill)")
    check_block(f"tile {tile} of the {kind} pass with head_dim {D}", tile.threads,
                shared_bytes(tile, D, kind), DYNAMIC_SHARED_LIMIT // min_blocks)


def donation(tile):
    """(lower, raise): the producer warpgroup's setmaxnreg to PRODUCER_REGISTERS, the
    computing ones' to what it leaves them (tile.donate; else setmaxnreg's 256, unused)."""
    return (set_max_registers(PRODUCER_REGISTERS, False),
            set_max_registers(consumer_registers(tile) if tile.donate else 256, True))


@functools.cache
def dkdv_kernel(D, tile):
    G, N, stages, min_blocks, producer, donate, fold = tile
    M = tile.rows
    s_regs, o_regs = N // 2, D // 2        # accumulators per thread: S^T, dP^T; dk, dv
    p_regs = N // 4                         # P^T, dS^T: bf16 pairs; a thread's columns
    kv_size = 2 * M * D                     # elements: k's tile, v's, then the stages
    stage_size = 2 * N * D                  # q's rows of a step, then dout's
    stats_at = (kv_size + stages * stage_size) // 2     # float32: each stage's lse, delta
    box, slot = N + STAT_PAD, stat_slot(N)  # floats: a statistic's box, its slot
    stage_bytes = 2 * stage_size + 4 * STATS * box
    s_wait_one, o_wait = warpgroup_wait(1, s_regs), warpgroup_wait(0, o_regs)
    scale = np.float32(1.0 / math.sqrt(D))
    scale_log2 = np.float32(LOG2E / math.sqrt(D))
    log2e = np.float32(LOG2E)
    # a fold's buffers (shared_bytes), in bytes from the aligned start; a warpgroup's dS
    # as the 128-byte rows of `ds_index`, its part of dq as D / FOLD_BOX boxes of 64 rows
    fold_at = fold_bytes(2 * (kv_size + stages * stage_size) + 4 * STATS * stages * slot)
    group_bytes, box_floats = fold_group_bytes(D), 64 * FOLD_BOX
    ds_index = swizzled(64)
    lines, phases = swizzle(FOLD_BOX // GROUP)
    fold_dq = fold_product(D, M)
    dq_wait = warpgroup_wait(0, D // 2)
    dq_regs = D // 2 if fold else 1         # dq's part of a step, a fold's accumulators

    # S^T = k q^T, dP^T = v dout^T: A the warpgroup's 64 keys, B the step's queries; dv +=
    # P^T dout, dk += dS^T q: B the step's rows (k = the queries)
    transposed_scores, accumulate = products(D, M, N)
    mask = causal_mask(N, transposed=True)
    copy_resident, copy_step = pair_copier(M, D), pair_copier(N, D)

    @cuda.jit(device=True, inline=True)
    def copy_queries(bars, stage, step, operands):
        """The rows of the block's query step `step` of q and dout into `stage`, and their
        lse and delta."""
        (smem, stats, q, dout, lse, delta, q_map, do_map, lse_map, delta_map, q_row, q_col,
         do_row, do_col, stat_col, first) = operands
        mbarrier_arrive_expect_tx(bars, stage, stage_bytes)
        t0 = (first + step) * N
        copy_step(smem, int32(kv_size + stage * stage_size), bars, stage, q, q_map, q_row + t0,
                  q_col, dout, do_map, do_row + t0, do_col)
        at = int32(stats_at + stage * STATS * slot)
        tma_load_2d(stats, at, lse, lse_map, stat_col + t0, 0, bars, stage)
        tma_load_2d(stats, at + slot, delta, delta_map, stat_col + t0, 0, bars, stage)

    pipe = tma_pipeline(stages, G, copy_queries)
    KV_LANDED = pipe.barriers
    BARRIERS = KV_LANDED + 1
    lower_registers, raise_registers = donation(tile)

    @jit(**({} if SIMULATOR else {"launch_bounds": (tile.threads, min_blocks)}))
    def hopper_attention_backward_dkdv_kernel(dk, dv, dq_sum, q, dout, k, v, lse, delta,
                                              q_map, do_map, k_map, v_map, lse_map,
                                              delta_map, dq_map, q_rb, q_rh, q_ch, do_rb,
                                              do_rh, do_ch, kv_rb, kv_rh, kv_ch):
        # dk, dv (B, H, T, D) bf16 bits; q, dout, k, v the 2-D matrices the heads are
        # views of, (rb, rh, ch) where their heads' rows lie (hopper's docstring); lse,
        # delta (1, B H T) float32; a fold's dq_sum (B H Tp, D) float32 (fold_sum: Tp = T
        # rounded up to a step) and its map of boxes (64, FOLD_BOX), unread otherwise.
        # Block (x, h, b) owns key rows k0 .. k0 + M, the first first (they walk the most
        # queries), and the query steps from the one holding k0.
        B, H, T = dk.shape[0], dk.shape[1], dk.shape[2]
        h, b = cuda.blockIdx.y, cuda.blockIdx.z
        group = warp_uniform(cuda.threadIdx.x // WARPGROUP)       # (as the forward's)
        thread = cuda.threadIdx.x % WARPGROUP
        k0 = cuda.blockIdx.x * M
        first = k0 // N
        steps = (T + N - 1) // N - first
        bars = cuda.shared.array(BARRIERS, uint64)
        raw = cuda.shared.array(0, uint16)
        raw32 = cuda.shared.array(0, float32)
        raw_words = cuda.shared.array(0, uint32)
        start = int32((SWIZZLE_BYTES - shared_address(raw, 0) % SWIZZLE_BYTES)
                      % SWIZZLE_BYTES // 2)
        smem = raw[start:]
        stats = raw32[start // 2:]
        words = raw_words[start // 2:]
        # the head's statistics begin at (b H + h) T; its boxes at the 16-byte boundary before
        head_stats = (b * H + h) * T
        stat_shift = int32(head_stats % STAT_PAD)
        operands = (smem, stats, q, dout, lse, delta, q_map, do_map, lse_map, delta_map,
                    b * q_rb + h * q_rh, h * q_ch, b * do_rb + h * do_rh, h * do_ch,
                    head_stats - stat_shift, first)
        issued = 0                               # the copier's steps copied
        if cuda.threadIdx.x == 0:
            pipe.init(bars)
            mbarrier_init(bars, KV_LANDED, 1)
            fence_barrier_init()
            for m in (q_map, do_map, k_map, v_map, lse_map, delta_map):
                fence_tensor_map(m)
            mbarrier_arrive_expect_tx(bars, KV_LANDED, 4 * M * D)
            kv_row = b * kv_rb + h * kv_rh + k0
            copy_resident(smem, int32(0), bars, KV_LANDED, k, k_map, kv_row, h * kv_ch, v,
                          v_map, kv_row, h * kv_ch)
            if not producer:
                issued = pipe.refill_ready(bars, stages - 1, stages - 1, issued, steps,
                                           operands)
        cuda.syncthreads()
        # the producer: every step's copies in turn. It returns from its own branch, so that
        # ptxas sees the computing code reached only after the registers are raised
        # (setmaxnreg ignored otherwise, as in the forward)
        if group == G:
            if donate:
                lower_registers()
            if thread == 0:
                pipe.refill_ready(bars, steps, steps, 0, steps, operands)
            return
        if donate:
            raise_registers()

        row = k0 + 64 * group + wgmma_accumulator_row(thread)     # and row + 8
        col = accumulator_col(thread)
        s = cuda.local.array(s_regs, float32)
        dp = cuda.local.array(s_regs, float32)
        p = cuda.local.array(p_regs, uint32)
        ds = cuda.local.array(p_regs, uint32)
        dk_acc = cuda.local.array(o_regs, float32)
        dv_acc = cuda.local.array(o_regs, float32)
        column = cuda.local.array(p_regs, float32)   # a column's lse, then its delta
        for r in range(o_regs):
            dk_acc[r] = ZERO
            dv_acc[r] = ZERO
        copies = not producer and cuda.threadIdx.x == 0
        k_at, v_at = int32(64 * group * PANEL), int32(M * D + 64 * group * PANEL)
        # a fold's: the warpgroup's dS (element index), its boxes of dq (float index), the
        # head's first row of dq_sum; the thread's rows of either, their swizzle phase
        dq_part = cuda.local.array(dq_regs, float32)
        ds_at = int32((fold_at + group * group_bytes) // 2)
        box_at = int32((fold_at + group * group_bytes + 2 * 64 * 64) // 4)
        sum_row = (b * H + h) * ((T + N - 1) // N * N)
        local = wgmma_accumulator_row(thread)                     # and local + 8
        phase = local // lines % phases
        if fold and thread == 0:
            fence_tensor_map(dq_map)
        # the steps wholly above the warpgroup's keys (queries all before its first)
        skip = (k0 + 64 * group) // N - first
        for it in range(min(skip, steps)):
            pipe.wait(bars, uint32(it))
            if thread == 0:
                pipe.release(bars, uint32(it))
        while not mbarrier_try_wait(bars, KV_LANDED, 0):
            pass
        for it in range(skip, steps):
            query0 = (first + it) * N
            # the step's stage and phase from an unsigned count: stages is a power of two,
            # so no division (numba's signed 64-bit one by 3 took ~25 instructions a step)
            u = uint32(it)
            at = int32(kv_size + u % stages * stage_size)
            pipe.wait(bars, u)
            transposed_scores(s, smem, k_at, at)
            transposed_scores(dp, smem, v_at, at + N * D)
            s_wait_one(s)               # S^T, and the previous step's products: dP^T runs on
            if thread == 0 and it > skip:
                pipe.release(bars, uint32(it - 1))
            if copies:
                issued = pipe.refill_ready(bars, it + 2, it + stages - 1, issued, steps,
                                           operands)
            # the stats by unsigned indices: numba wraps a signed one that is negative
            # around the array's end (two compares and a select a load)
            stat = int32(stats_at + u % stages * STATS * slot + stat_shift + col)
            for j in range(N // 8):
                for e in range(2):
                    column[2 * j + e] = stats[uint32(stat + 8 * j + e)] * log2e
            if query0 < k0 + 64 * group + 64 or query0 + N > T:
                mask(s, row, query0, col, T)
            for j in range(N // 8):
                for r in range(4):
                    s[4 * j + r] = exp2_ftz(cuda.fma(s[4 * j + r], scale_log2,
                                                     -column[2 * j + r % 2]))
            for r in range(p_regs):
                p[r] = pack_bf16x2(s[2 * r], s[2 * r + 1])
            accumulate(dv_acc, p, smem, at + N * D)
            for j in range(N // 8):
                for e in range(2):
                    column[2 * j + e] = stats[uint32(stat + slot + 8 * j + e)]
            s_wait_one(dp)              # dP^T; dv's product runs on
            for j in range(N // 8):
                for r in range(4):
                    dp[4 * j + r] = s[4 * j + r] * (dp[4 * j + r] - column[2 * j + r % 2])
            for r in range(p_regs):
                ds[r] = pack_bf16x2(dp[2 * r], dp[2 * r + 1])
            accumulate(dk_acc, ds, smem, at)
            if fold:
                # dS^T's pairs (rows the keys, columns the queries: the MN-major A of dS k)
                # stored while dk's product reads them too (read, not written: no wgmma
                # serialized); the last step's product read the buffer before its boxes
                # were laid, and its adds read those before thread 0 passes the barrier
                for j in range(N // 8):
                    for half in range(2):
                        words[uint32(ds_index(local + 8 * half, 8 * j + col) // 2
                                     + ds_at // 2)] = ds[2 * j + half]
                fence_proxy_async()
                if thread == 0:
                    bulk_wait()
                named_barrier(1 + group, WARPGROUP)
                fold_dq(dq_part, smem, ds_at, k_at)
                dq_wait(dq_part)        # (and dk's product)
                # the part (rows the step's queries) as boxes of FOLD_BOX columns, each
                # added by one bulk add of thread 0's, the step's one bulk group
                for j in range(D // 8):
                    for half in range(2):
                        chunk = (8 * (j % (FOLD_BOX // 8)) + col) // GROUP ^ phase
                        at_f = uint32(box_at + j // (FOLD_BOX // 8) * box_floats
                                      + (local + 8 * half) * FOLD_BOX + chunk * GROUP
                                      + col % GROUP)
                        stats[at_f] = dq_part[4 * j + 2 * half]
                        stats[at_f + 1] = dq_part[4 * j + 2 * half + 1]
                fence_proxy_async()
                named_barrier(1 + group, WARPGROUP)
                if thread == 0:
                    for part in range(D // FOLD_BOX):
                        tma_add_2d(dq_sum, dq_map, part * FOLD_BOX, sum_row + query0, stats,
                                   box_at + part * box_floats)
                    bulk_commit()
        o_wait(dk_acc)
        o_wait(dv_acc)
        if thread == 0 and steps > skip:
            pipe.release(bars, uint32(steps - 1))
        if fold and thread == 0:
            bulk_wait()                 # the block's shared memory read before it leaves

        # a thread's pairs of columns by 4-byte stores (_check_heads: the rows 16-byte
        # aligned), at unsigned indices here and in the dq pass (as the statistics')
        dkh, dvh = dk[b, h], dv[b, h]
        for half in range(2):
            i = uint32(row + 8 * half)
            if i < T:
                for j in range(D // 8):
                    r, c = 4 * j + 2 * half, uint32(8 * j + col)
                    store_pair(dkh, (i, c), pack_bf16x2(dk_acc[r] * scale, dk_acc[r + 1] * scale))
                    store_pair(dvh, (i, c), pack_bf16x2(dv_acc[r], dv_acc[r + 1]))

    hopper_attention_backward_dkdv_kernel.whole_program = donate
    return hopper_attention_backward_dkdv_kernel


@functools.cache
def dq_kernel(D, tile):
    G, N, stages, min_blocks, producer, donate, _ = tile
    M = tile.rows
    s_regs, o_regs = N // 2, D // 2        # accumulators per thread: S, dP; dq
    p_regs = N // 4                         # dS: bf16 pairs
    own_size = 2 * M * D                    # elements: q's tile, dout's, then the stages
    stage_size = 2 * N * D                  # k's rows of a step, then v's
    s_wait_one, s_wait_all = warpgroup_wait(1, s_regs), warpgroup_wait(0, s_regs)
    o_wait = warpgroup_wait(0, o_regs)
    scale = np.float32(1.0 / math.sqrt(D))
    scale_log2 = np.float32(LOG2E / math.sqrt(D))
    log2e = np.float32(LOG2E)

    # S = q k^T, dP = dout v^T: A the warpgroup's 64 queries, B the step's keys; dq += dS
    # k: B the step's keys (k = the keys)
    scores, accumulate = products(D, M, N)
    mask = causal_mask(N)
    copy_resident, copy_step = pair_copier(M, D), pair_copier(N, D)

    @cuda.jit(device=True, inline=True)
    def copy_keys(bars, stage, step, operands):
        """The key and value rows of key step `step` into `stage`."""
        smem, k, v, k_map, v_map, kv_row, kv_col = operands
        mbarrier_arrive_expect_tx(bars, stage, 2 * stage_size)
        row = kv_row + step * N
        copy_step(smem, int32(own_size + stage * stage_size), bars, stage, k, k_map, row,
                  kv_col, v, v_map, row, kv_col)

    pipe = tma_pipeline(stages, G, copy_keys)
    OWN_LANDED = pipe.barriers
    BARRIERS = OWN_LANDED + 1
    lower_registers, raise_registers = donation(tile)

    @jit(**({} if SIMULATOR else {"launch_bounds": (tile.threads, min_blocks)}))
    def hopper_attention_backward_dq_kernel(dq, delta, dout, out, lse, qm, dom, km, vm, q_map,
                                            do_map, k_map, v_map, q_rb, q_rh, q_ch, do_rb,
                                            do_rh, do_ch, kv_rb, kv_rh, kv_ch):
        # dq, dout, out (B, H, T, D) bf16 bits; delta (written), lse (B, H, T); qm, dom,
        # km, vm the 2-D matrices q's, dout's, k's and v's heads are views of (hopper's
        # docstring). Block (x, h, b) owns query rows q0 .. q0 + M, the last first.
        B, H, T = dq.shape[0], dq.shape[1], dq.shape[2]
        h, b = cuda.blockIdx.y, cuda.blockIdx.z
        group = warp_uniform(cuda.threadIdx.x // WARPGROUP)       # (as the forward's)
        thread = cuda.threadIdx.x % WARPGROUP
        q0 = (cuda.gridDim.x - 1 - cuda.blockIdx.x) * M
        steps = (min(T, q0 + M) + N - 1) // N
        bars = cuda.shared.array(BARRIERS, uint64)
        raw = cuda.shared.array(0, uint16)
        start = int32((SWIZZLE_BYTES - shared_address(raw, 0) % SWIZZLE_BYTES)
                      % SWIZZLE_BYTES // 2)
        smem = raw[start:]
        operands = (smem, km, vm, k_map, v_map, b * kv_rb + h * kv_rh, h * kv_ch)
        issued = 0                               # the copier's steps copied
        if cuda.threadIdx.x == 0:
            pipe.init(bars)
            mbarrier_init(bars, OWN_LANDED, 1)
            fence_barrier_init()
            for m in (q_map, do_map, k_map, v_map):
                fence_tensor_map(m)
            mbarrier_arrive_expect_tx(bars, OWN_LANDED, 4 * M * D)
            copy_resident(smem, int32(0), bars, OWN_LANDED, qm, q_map, b * q_rb + h * q_rh + q0,
                          h * q_ch, dom, do_map, b * do_rb + h * do_rh + q0, h * do_ch)
            if not producer:
                issued = pipe.refill_ready(bars, stages - 1, stages - 1, issued, steps,
                                           operands)
        cuda.syncthreads()
        if group == G:                  # the producer, as the dk/dv pass's
            if donate:
                lower_registers()
            if thread == 0:
                pipe.refill_ready(bars, steps, steps, 0, steps, operands)
            return
        if donate:
            raise_registers()

        first = q0 + 64 * group
        row = first + wgmma_accumulator_row(thread)             # and row + 8
        col = accumulator_col(thread)
        # delta = rowsum(dout * out) of the thread's rows, the 4 lanes of a row splitting
        # it (a quarter each, by 8-byte loads: _check_heads has the rows 16-byte aligned),
        # while the copies fly; lse to the log2 domain, +inf past T: p = 0 there
        doh, oh = dout[b, h], out[b, h]
        row_lse = cuda.local.array(2, float32)
        row_delta = cuda.local.array(2, float32)
        do4 = cuda.local.array(GROUP, float32)
        o4 = cuda.local.array(GROUP, float32)
        for half in range(2):
            i = uint32(row + 8 * half)
            part = ZERO
            if i < T:
                for g in range(D // 4 // GROUP):
                    c = uint32(thread % 4 * (D // 4) + GROUP * g)
                    load_group4(do4, 0, doh, (i, c))
                    load_group4(o4, 0, oh, (i, c))
                    for e in range(GROUP):
                        part += do4[e] * o4[e]
            row_delta[half] = quad_sum(part)
            row_lse[half] = lse[b, h, i] * log2e if i < T else INF
            if i < T and thread % 4 == 0:
                delta[b, h, i] = row_delta[half]
        s = cuda.local.array(s_regs, float32)
        dp = cuda.local.array(s_regs, float32)
        ds = cuda.local.array(p_regs, uint32)
        dq_acc = cuda.local.array(o_regs, float32)
        for r in range(o_regs):
            dq_acc[r] = ZERO
        copies = not producer and cuda.threadIdx.x == 0
        q_at, do_at = int32(64 * group * PANEL), int32(M * D + 64 * group * PANEL)
        # the warpgroup's key steps: to the one holding its last row (none past T)
        own = (min(T, first + 64) + N - 1) // N if first < T else 0
        while not mbarrier_try_wait(bars, OWN_LANDED, 0):
            pass
        for it in range(own):
            key0 = it * N
            u = uint32(it)                  # (as the dk/dv pass's)
            at = int32(own_size + u % stages * stage_size)
            pipe.wait(bars, u)
            scores(s, smem, q_at, at)
            scores(dp, smem, do_at, at + N * D)
            s_wait_one(s)               # S, and the previous step's product: dP runs on
            if key0 + N > first or key0 + N > T:
                mask(s, row, key0, col, T)
            for j in range(N // 8):
                for r in range(4):
                    s[4 * j + r] = exp2_ftz(cuda.fma(s[4 * j + r], scale_log2,
                                                     -row_lse[r // 2]))
            # The release and the copies between P and the wait for dP: their branches end
            # the basic block, above which ptxas does not hoist the wait (at the top of
            # P's block, as the SASS of session 23 showed, the exps ran after dP's product
            # instead of under it)
            if thread == 0 and it > 0:
                pipe.release(bars, uint32(it - 1))
            if copies:
                issued = pipe.refill_ready(bars, it + 2, it + stages - 1, issued, steps,
                                           operands)
            s_wait_all(dp)
            for j in range(N // 8):
                for r in range(4):
                    dp[4 * j + r] = s[4 * j + r] * (dp[4 * j + r] - row_delta[r // 2])
            for r in range(p_regs):
                ds[r] = pack_bf16x2(dp[2 * r], dp[2 * r + 1])
            accumulate(dq_acc, ds, smem, at)
        o_wait(dq_acc)
        if thread == 0 and own > 0:
            pipe.release(bars, uint32(own - 1))
        for it in range(own, steps):     # the block's steps past the warpgroup's rows
            if copies:
                issued = pipe.refill_ready(bars, it + 2, it + stages - 1, issued, steps,
                                           operands)
            pipe.wait(bars, uint32(it))
            if thread == 0:
                pipe.release(bars, uint32(it))

        dqh = dq[b, h]
        for half in range(2):
            i = uint32(row + 8 * half)
            if i < T:
                for j in range(D // 8):
                    r = 4 * j + 2 * half
                    store_pair(dqh, (i, uint32(8 * j + col)),
                               pack_bf16x2(dq_acc[r] * scale, dq_acc[r + 1] * scale))

    hopper_attention_backward_dq_kernel.whole_program = donate
    return hopper_attention_backward_dq_kernel


ROW_THREADS = 128           # the fold's row passes: 32 rows a block, 4 lanes a row


@functools.cache
def fold_rows_kernel(D):
    """A fold's first pass (BackwardTile.fold): delta = rowsum(dout * out) of each query
    row, as the dq pass computes it, and the head's rows of the float32 sum of dq zeroed
    (its padded rows too, which the dk/dv pass's boxes add into)."""
    @jit
    def hopper_attention_backward_fold_rows_kernel(delta, dq_sum, dout, out):
        # delta (B, H, T) float32, written; dq_sum (B H Tp, D) float32, zeroed; dout, out
        # (B, H, T, D) bf16 bits. Block (x, h, b): the head's rows 32 x ..
        B, H, T = delta.shape[0], delta.shape[1], delta.shape[2]
        h, b = cuda.blockIdx.y, cuda.blockIdx.z
        rows = dq_sum.shape[0] // (B * H)
        i = cuda.blockIdx.x * (ROW_THREADS // 4) + cuda.threadIdx.x // 4
        c0 = cuda.threadIdx.x % 4 * (D // 4)
        doh, oh = dout[b, h], out[b, h]
        do4 = cuda.local.array(GROUP, float32)
        o4 = cuda.local.array(GROUP, float32)
        part = ZERO
        if i < T:
            for g in range(D // 4 // GROUP):
                load_group4(do4, 0, doh, (i, c0 + GROUP * g))
                load_group4(o4, 0, oh, (i, c0 + GROUP * g))
                for e in range(GROUP):
                    part += do4[e] * o4[e]
        total = quad_sum(part)          # (every lane of the warp: a shuffle)
        if i < T and cuda.threadIdx.x % 4 == 0:
            delta[b, h, i] = total
        if i < rows:
            r = (b * H + h) * rows + i
            for c in range(D // 4):
                dq_sum[r, c0 + c] = ZERO
    return hopper_attention_backward_fold_rows_kernel


@functools.cache
def fold_dq_kernel(D):
    """A fold's last pass: dq = the float32 sum times 1 / sqrt(D), rounded to bf16."""
    scale = np.float32(1.0 / math.sqrt(D))

    @jit
    def hopper_attention_backward_fold_dq_kernel(dq, dq_sum):
        # dq (B, H, T, D) bf16 bits, written; dq_sum (B H Tp, D) float32
        B, H, T = dq.shape[0], dq.shape[1], dq.shape[2]
        h, b = cuda.blockIdx.y, cuda.blockIdx.z
        rows = dq_sum.shape[0] // (B * H)
        i = cuda.blockIdx.x * (ROW_THREADS // 4) + cuda.threadIdx.x // 4
        c0 = cuda.threadIdx.x % 4 * (D // 4)
        if i < T:
            r = (b * H + h) * rows + i
            dqh = dq[b, h]
            for c in range(0, D // 4, 2):
                store_pair(dqh, (i, c0 + c), pack_bf16x2(dq_sum[r, c0 + c] * scale,
                                                         dq_sum[r, c0 + c + 1] * scale))
    return hopper_attention_backward_fold_dq_kernel


_HEADS = types.Array(types.uint16, 4, "A")
_MATRIX = types.Array(types.uint16, 2, "A")
_ROWS3 = types.float32[:, :, ::1]
_STATS = types.Array(types.float32, 2, "A")
_MAP = types.uint64[::1]
DQ_SIGNATURE = ((_HEADS, _ROWS3, _HEADS, _HEADS, _ROWS3) + (_MATRIX,) * 4 + (_MAP,) * 4
                + (types.int32,) * 9)
_SUM = types.float32[:, ::1]
# (the unfolded pass takes lse's row and map in dq_sum's and dq_map's places, unread)
DKDV_SIGNATURE = ((_HEADS,) * 2 + (_STATS,) + (_MATRIX,) * 4 + (_STATS,) * 2 + (_MAP,) * 7
                  + (types.int32,) * 9)
FOLD_SIGNATURE = ((_HEADS,) * 2 + (_SUM,) + (_MATRIX,) * 4 + (_STATS,) * 2 + (_MAP,) * 7
                  + (types.int32,) * 9)
# the fold at D 64 as the next session measures it (bench ab.py's "this:fold")
FOLD_TILE = BackwardTile(2, 64, 8, 1, True, True, True)
PTX_SIGNATURES = [entry for D in WIDTHS for entry in (
    (dq_kernel(D, default_tile(D, "dq")), DQ_SIGNATURE),
    (dkdv_kernel(D, default_tile(D, "dkdv")), DKDV_SIGNATURE),
    (fold_rows_kernel(D), (_ROWS3, _SUM, _HEADS, _HEADS)),
    (fold_dq_kernel(D), (_HEADS, _SUM)))] + [(dkdv_kernel(64, FOLD_TILE), FOLD_SIGNATURE)]


# ----------------------------------------------------------------------------------
# launcher

def statistics_row(x):
    """A (B, H, T) float32 array of its own as the one row (1, B H T) the bulk copies read
    (its row pitch rounded up to 16 bytes, which a single row never steps over)."""
    n = x.size
    pitch = ceil_div(4 * n, 16) * 16
    if SIMULATOR:
        from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

        data = np.asarray(getattr(x, "_ary", x))
        return FakeCUDAArray(np.lib.stride_tricks.as_strided(data, (1, n), (pitch, 4)))
    from numba.cuda.cudadrv import devicearray

    return devicearray.DeviceNDArray((1, n), (pitch, 4), x.dtype, gpu_data=x.gpu_data)


def takes(dq, dk, dv, delta, dout, q, k, v, out, lse):
    """Whether the op runs these heads here: on sm_90, a width of WIDTHS, T at least
    hopper.MIN_T (as the forward: shorter walks were not compared), q, k, v and dout views
    of matrices the bulk copies read, lse and delta at addresses the copies take."""
    from .hopper import MIN_T

    if SIMULATOR or cuda.get_current_device().compute_capability[0] != 9:
        return False
    return (q.shape[3] in WIDTHS and q.shape[2] >= MIN_T
            and all(head_matrix(x) is not None for x in (q, k, v, dout))
            and all(_statistics_ready(x) for x in (lse, delta)))


def _statistics_ready(x):
    """(B, H, T) float32 C-contiguous (flash._check_heads), at an address the copies take."""
    return x.is_c_contiguous() and device_address(x) % 16 == 0


def _launch(kernel, tile, D, kind, grid, stream, args, matrices):
    launch_pass(kernel, grid, tile.threads, shared_bytes(tile, D, kind), stream, args,
                matrices, tile.donate)


def hopper_attention_backward(dq, dk, dv, delta, dout, q, k, v, out, lse, *,
                              tiles=(None, None), stream=0):
    """dq, dk, dv (B, H, T, D) bf16 and delta (B, H, T) float32 = rowsum(dout * out),
    overwritten, from dout and the forward's q, k, v, out and lse, as
    flash_backward.flash_attention_backward. Two launches: dq by query tiles (writing
    delta), then dk and dv by key tiles (reading it); tiles: their BackwardTiles (default
    by D), or a FlashTile for flash_backward's mma.sync dq pass. A dk/dv tile with fold
    (tiles[0] then None): three launches, delta and a zeroed float32 sum of dq
    (fold_rows_kernel), dk, dv and dq's sum by key tiles, dq from the sum
    (fold_dq_kernel)."""
    B, H, T, D = flash._check_heads(dict(lse=lse, delta=delta), q=q, k=k, v=v, out=out,
                                    dout=dout, dq=dq, dk=dk, dv=dv)
    if q.size == 0:
        return
    for name, x in (("lse", lse), ("delta", delta)):
        if not _statistics_ready(x):
            raise ValueError(f"{name}: the wgmma backward's bulk copies read it from a "
                             "16-byte aligned address")
    mma_sync_dq = isinstance(tiles[0], flash.FlashTile)
    fold = tiles[1] is not None and BackwardTile(*tiles[1]).fold
    if fold and tiles[0] is not None:
        raise ValueError(f"tiles {tiles}: a folded dk/dv pass computes dq itself (no dq "
                         "pass's tile)")
    dq_tile, dkdv_tile = (
        tiles[0] if mma_sync_dq else
        default_tile(D, "dq") if tiles[0] is None else BackwardTile(*tiles[0]),
        default_tile(D, "dkdv") if tiles[1] is None else BackwardTile(*tiles[1]))
    if not mma_sync_dq and not fold:
        check_tile(dq_tile, D, "dq")
    check_tile(dkdv_tile, D, "dkdv")
    (qm, q_layout), (dom, do_layout), (km, kv_layout), (vm, v_layout) = (
        described_heads(name, x) for name, x in (("q", q), ("dout", dout), ("k", k),
                                                 ("v", v)))
    if kv_layout != v_layout:
        raise ValueError("k and v must lie alike")
    layouts = (*q_layout, *do_layout, *kv_layout)
    if fold:
        dq_sum = fold_sum(B * H * ceil_div(T, dkdv_tile.step) * dkdv_tile.step, D)
        row_grid = (ceil_div(dq_sum.shape[0] // (B * H), ROW_THREADS // 4), H, B)
        fold_rows_kernel(D)[row_grid, ROW_THREADS, stream](delta, dq_sum, dout, out)
    elif mma_sync_dq:
        dq_tile = flash._tile(dq_tile, D, "dq")
        flash_backward._dq_kernel(D, dq_tile)[(ceil_div(T, dq_tile.rows), H, B),
                                              dq_tile.threads, stream](
            dq, delta, dout, q, k, v, out, lse)
    else:
        maps = (tensor_map(qm, dq_tile.rows, PANEL), tensor_map(dom, dq_tile.rows, PANEL),
                tensor_map(km, dq_tile.step, PANEL), tensor_map(vm, dq_tile.step, PANEL))
        _launch(dq_kernel(D, dq_tile), dq_tile, D, "dq", (ceil_div(T, dq_tile.rows), H, B),
                stream, (dq, delta, dout, out, lse, qm, dom, km, vm, *maps, *layouts),
                (dq, dout, out, qm, dom, km, vm))
    lse_row, delta_row = statistics_row(lse), statistics_row(delta)
    maps = (tensor_map(qm, dkdv_tile.step, PANEL), tensor_map(dom, dkdv_tile.step, PANEL),
            tensor_map(km, dkdv_tile.rows, PANEL), tensor_map(vm, dkdv_tile.rows, PANEL),
            tensor_map(lse_row, 1, dkdv_tile.step + STAT_PAD),
            tensor_map(delta_row, 1, dkdv_tile.step + STAT_PAD))
    # (unfolded, lse's row and map stand in for dq's sum and its map: the pass reads
    # neither)
    sum_args = (dq_sum, tensor_map(dq_sum, 64, FOLD_BOX)) if fold else (lse_row, maps[4])
    _launch(dkdv_kernel(D, dkdv_tile), dkdv_tile, D, "dkdv",
            (ceil_div(T, dkdv_tile.rows), H, B), stream,
            (dk, dv, sum_args[0], qm, dom, km, vm, lse_row, delta_row, *maps, sum_args[1],
             *layouts), (dk, dv, qm, dom, km, vm))
    if fold:
        fold_dq_kernel(D)[(ceil_div(T, ROW_THREADS // 4), H, B), ROW_THREADS, stream](
            dq, dq_sum)


def fold_sum(rows, D):
    """The float32 (rows, D) sum of dq a fold adds into: one a shape, kept (its tensor
    map is encoded once, as the other matrices'), zeroed by each backward's row pass."""
    key = (rows, D)
    if key not in _sums:
        _sums[key] = cuda.device_array(key, np.float32)
    return _sums[key]


_sums = {}
