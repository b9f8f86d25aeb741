"""Flash attention's forward on Hopper's warpgroup MMA (sm_90a): causal softmax(q k^T /
sqrt(D)) v for head_dim 64 and 128, bf16 storage, float32 accumulation.

NumPy twin: ``microgpt.reference.attention_forward`` on the same bf16-rounded q, k, v, as
for ``flash`` (the mma.sync kernels), whose arguments and lse convention this forward
keeps: its backward reads this lse (the natural-log logsumexp of each row's scaled
scores) and out.

How a block works (docs/flash-attention.md, "The wgmma forward"). A block owns `rows` =
64 x warpgroups query rows of one (batch, head); each warpgroup of 128 threads owns 64 of
them. The bulk tensor copy engine brings the block's q tile into shared memory once and
the key and value tiles, `step` rows at a time, into `stages` buffers (pipelines.tma:
thread 0 issues the copies stages - 1 steps ahead, the warpgroups release each buffer
when done with it). Per step each warpgroup computes its 64 x step scores S = q k^T by
wgmma from shared memory (both operands K-major), takes the online softmax of them in
the accumulator registers (log2 domain, exp2 of one FFMA, the row max and sum over the
4 lanes of a row by two shuffles, as ``flash``), rounds P to bf16 pairs in place (the
accumulator layout of 16 columns is the A fragment of wgmma's register form) and adds P
v into its output accumulators by wgmma with A from registers (``atoms.wgmma_bf16_rs``),
v read MN-major. Only the key steps at or below the diagonal are walked; a warpgroup
skips the step wholly past its rows, and masks the one that crosses them (and the one
past T) element by element. q, k and v are views of 2-D matrices the bulk copies read
(``hopper_operands``: a box past row T of a head reads the next head's rows, masked);
out is written from the registers, a row's pairs of columns at a time, rows past T not.
"""
import functools
import math
from typing import NamedTuple

import numpy as np
from numba import cuda, float32, int32, types, uint16, uint32, uint64

from ..atoms import (exp2_ftz, fence_barrier_init, fence_tensor_map, mbarrier_arrive,
                     mbarrier_arrive_expect_tx, mbarrier_init, mbarrier_try_wait,
                     named_barrier, named_barrier_arrive, pack_bf16x2, rcp_approx,
                     set_max_registers, shared_address, store_pair, tma_load_2d,
                     warp_uniform, warpgroup_wait)
from ..cache import jit
from ..common import ceil_div
from ..device import (DYNAMIC_SHARED_LIMIT, SIMULATOR, SMS, SWIZZLE_BYTES, WARPGROUP,
                      check_block)
from ..layouts.fragments import accumulator_col, wgmma_accumulator_row
from ..layouts.tensor_maps import tensor_map
from ..layouts.tiles import PANEL
from ..pipelines.tma import tma_pipeline
from .flash import quad_max, quad_sum   # a row's 4 lanes, the same accumulator layout
from .hopper_operands import (NEG_INF, causal_mask, described_heads, head_matrix,
                              launch_pass, pair_copier, products)

LOG2E = 1.4426950408889634
ZERO = np.float32(0.0)
WIDTHS = (64, 128)          # the head_dims this forward takes (others: flash's)


class HopperTile(NamedTuple):
    """warpgroups: of 128 threads, each owning 64 query rows; step: key rows per stage;
    stages: shared buffers of key and value tiles; producer: a warp of its own issues the
    copies (else the first warpgroup's thread 0, between its products); donate (with
    producer): that warp is the first of a warpgroup of its own, which hands its registers
    to the computing ones (setmaxnreg, which only the driver's whole-program JIT honours:
    the kernel is launched by it); pingpong: the warpgroups take turns, in a ring, to
    issue their products (each one's softmax then runs while the others' products do);
    min_blocks: blocks per SM that the register allocation must leave room for (the
    launch bounds), so that one block's start and end overlap another's walk;
    persistent: min_blocks blocks an SM walk all the query tiles, the copies of the next
    one's q (two buffers) and first steps under this one's last."""
    warpgroups: int = 2
    step: int = 128
    stages: int = 3
    producer: bool = False
    pingpong: bool = False
    min_blocks: int = 1
    persistent: bool = False
    donate: bool = False

    @property
    def q_buffers(self):
        return 2 if self.persistent else 1

    @property
    def rows(self):
        return 64 * self.warpgroups

    @property
    def threads(self):
        return (WARPGROUP * self.warpgroups
                + (WARPGROUP if self.donate else 32 if self.producer else 0))


# The shortest T at which D 64 takes three computing warpgroups: measured faster at T 4096,
# slower at 1024 (docs/flash-attention.md, session 22 call B); between them not measured
LONG_T = 4096


def default_tile(D, T):
    """The fastest tiles of the H200 (docs/flash-attention.md, session 22 call B, graph ms
    against main's): at D 64 and T below LONG_T steps of 64 keys, ping-pong, two blocks an
    SM (andrea-120m 0.0957); from LONG_T on a producer warpgroup donating its registers to
    three computing ones, steps of 128, ping-pong (T 4096 0.2602 against 0.3072); at D 128
    the same with two computing warpgroups (0.2834 against 0.3766). (The simulator, which
    runs neither ping-pong nor two warpgroups at a pace, takes one warpgroup.)"""
    if SIMULATOR:
        return HopperTile(1, 64, 3)
    if D == 64 and T < LONG_T:
        return HopperTile(2, 64, 4, pingpong=True, min_blocks=2)
    return HopperTile(3 if D == 64 else 2, 128, 3, producer=True, pingpong=True, donate=True)


def shared_bytes(tile, D):
    """q's tiles, then the stages of k and v, and room to align the start to a swizzle
    pattern (the launch promises 16 bytes)."""
    return 2 * D * (tile.q_buffers * tile.rows + 2 * tile.stages * tile.step) + SWIZZLE_BYTES


# a thread of the producer warpgroup, which issues copies only (setmaxnreg's least)
PRODUCER_REGISTERS = 24
REGISTERS = 65536           # an SM's


def consumer_registers(tile):
    """The registers a thread of a computing warpgroup takes from a donating producer's:
    the launch bounds' share of the SM's (in steps of 8), the producer's all but
    PRODUCER_REGISTERS, at most setmaxnreg's 256."""
    share = REGISTERS // (tile.threads * tile.min_blocks) // 8 * 8
    return min(256, (share * (tile.warpgroups + 1) - PRODUCER_REGISTERS)
               // tile.warpgroups // 8 * 8)


def check_tile(tile, D):
    warpgroups, step, stages, producer, pingpong, min_blocks, persistent, donate = tile
    if D not in WIDTHS:
        raise ValueError(f"head_dim {D}: the wgmma forward takes {WIDTHS}")
    if not 1 <= warpgroups <= 4:
        raise ValueError(f"tile {tile}: 1 to 4 warpgroups")
    if step not in (64, 128, 192, 256) or step * D > 128 * 128:
        raise ValueError(f"tile {tile}: step must be 64, 128, 192 or 256 keys (wgmma's n), "
                         "at most 128 at head_dim 128 (its accumulators)")
    if not 3 <= stages <= 4:
        raise ValueError(f"tile {tile}: stages must be 3 or 4")
    if pingpong and warpgroups < 2:
        raise ValueError(f"tile {tile}: ping-pong takes two warpgroups or more")
    if (producer or pingpong or persistent and warpgroups > 1) and SIMULATOR:
        # a copying thread spins on barriers (a producer warp's, or across a persistent
        # block's tiles, where the warpgroups fall out of step), a warpgroup waits for its
        # turn at a named barrier, while the other threads' twins of warp shuffles wait in
        # syncthreads for every live thread of the block
        raise ValueError(f"tile {tile}: a producer warp, ping-pong and persistent blocks of "
                         "two warpgroups run on the GPU only")
    if min_blocks not in (1, 2):
        raise ValueError(f"tile {tile}: min_blocks must be 1 or 2")
    if donate and not producer:
        raise ValueError(f"tile {tile}: donate hands a producer warpgroup's registers on")
    check_block(f"tile {tile} with head_dim {D}", tile.threads, shared_bytes(tile, D),
                DYNAMIC_SHARED_LIMIT // min_blocks)


@functools.cache
def forward_kernel(D, tile):
    G, N, stages, producer, pingpong, min_blocks, persistent, donate = tile
    QB = tile.q_buffers
    M = tile.rows
    panels = D // PANEL                     # 64-column panels of a head row
    s_regs, o_regs = N // 2, D // 2         # accumulators per thread: S (64 x N), O (64 x D)
    p_regs = N // 4                         # P: bf16 pairs, 4 per 16 keys
    pairs = N // 8                          # a thread's pairs of a row in S
    levels = pairs.bit_length() - 1         # of a tree over them
    q_size = QB * M * D                     # elements: q's tiles, then the stages
    stage_size = 2 * N * D
    stage_bytes = 2 * stage_size
    # S = q k^T: A the warpgroup's 64 rows of q, B the step's keys; O += P v: B v's rows
    products_qk, products_pv = products(D, M, N)
    s_wait_one, s_wait_all = warpgroup_wait(1, s_regs), warpgroup_wait(0, s_regs)
    o_wait = warpgroup_wait(0, o_regs)
    scale_log2 = np.float32(LOG2E / math.sqrt(D))
    ln2 = np.float32(math.log(2.0))
    copier = G * WARPGROUP      # with a producer, the thread that issues the copies
    lower_registers = set_max_registers(PRODUCER_REGISTERS, False)
    raise_registers = set_max_registers(consumer_registers(tile) if donate else 256, True)

    copy_pair = pair_copier(N, D)
    mask = causal_mask(N)

    @cuda.jit(device=True, inline=True)
    def copy_keys(bars, stage, step, operands):
        """The key and value tiles of key step `step` into `stage`."""
        smem, k, v, k_map, v_map, kv_row, kv_col = operands
        mbarrier_arrive_expect_tx(bars, stage, stage_bytes)
        row = kv_row + step * N
        copy_pair(smem, int32(q_size + stage * stage_size), bars, stage, k, k_map, row, kv_col,
                  v, v_map, row, kv_col)

    pipe = tma_pipeline(stages, G, copy_keys)
    Q_LANDED = pipe.barriers                # a barrier per q buffer, then its 'read'
    Q_READ = Q_LANDED + QB
    BARRIERS = Q_READ + QB

    @cuda.jit(device=True, inline=True)
    def advance(tile_at, by, H, B):
        """tile_at (query tile, h, b) moved `by` tiles on in the walk's order: every (batch,
        head) of one query tile, the last query tile first; the query tile below 0 past
        the end. By steps (no division by a variable: a 64-bit one is a call, which
        serializes a kernel's wgmma)."""
        tile_at[1] += by
        while tile_at[1] >= H:
            tile_at[1] -= H
            tile_at[2] += 1
            if tile_at[2] == B:
                tile_at[2] = 0
                tile_at[0] -= 1

    # Not inline=True: numba would copy its typed IR into each of the five call sites
    # and lower every copy (the D 128 kernel compiled in 17.8 s, 7.8 s without). NVVM
    # inlines it all the same: the PTX holds no call, which would serialize the wgmma
    # (test_compile's check).
    @cuda.jit(device=True)
    def copy_ahead(bars, cur, limit, operands, H, B, T):
        """The copier's walk: the copies of the block's steps (counted over its tiles) up
        to limit (exclusive), each once its stage is released, and of each tile's q before
        its first step's, once its buffer is. cur: (query tile, h, b, step in the tile,
        steps of the tile, the block's step, tiles begun)."""
        smem, q, k, v, q_map, k_map, v_map, q_rb, q_rh, q_ch, kv_rb, kv_rh, kv_ch = operands
        while cur[0] >= 0 and cur[5] < limit:
            h, b = cur[1], cur[2]
            if cur[3] == 0:
                n = cur[6]
                buf = n % QB
                while not mbarrier_try_wait(bars, Q_READ + buf, (n // QB + 1) % 2):
                    pass
                mbarrier_arrive_expect_tx(bars, Q_LANDED + buf, 2 * M * D)
                for p in range(panels):
                    tma_load_2d(smem, int32(buf * M * D + p * M * PANEL), q, q_map,
                                h * q_ch + p * PANEL, b * q_rb + h * q_rh + cur[0] * M,
                                bars, Q_LANDED + buf)
                cur[4] = (min(T, cur[0] * M + M) + N - 1) // N
            # (an unsigned count, as the consumers': numba's signed 64-bit % and // took
            # ~30 instructions of the copying warp a step, which paces its warpgroup)
            g = uint32(cur[5])
            stage = g % stages
            while not mbarrier_try_wait(bars, stages + stage, (g // stages + 1) % 2):
                pass
            copy_keys(bars, stage, cur[3], (smem, k, v, k_map, v_map, b * kv_rb + h * kv_rh,
                                            h * kv_ch))
            cur[3] += 1
            cur[5] += 1
            if cur[3] == cur[4]:
                cur[3] = 0
                cur[6] += 1
                if persistent:
                    advance(cur, cuda.gridDim.x, H, B)
                else:
                    cur[0] = -1

    @cuda.jit(device=True, inline=True)
    def start_copies(bars, cur, limit, operands, H, B, T):
        """The copier's first walk (copy_ahead), once the tensor maps are fetched."""
        for tensor in operands[4:7]:
            fence_tensor_map(tensor)
        copy_ahead(bars, cur, limit, operands, H, B, T)

    @cuda.jit(device=True, inline=True)
    def scores(s, smem, q_at, g):
        """Issues s = q k^T of the block's step g (the warpgroup's 64 rows of the q tile
        at q_at by the step's keys)."""
        products_qk(s, smem, q_at, int32(q_size + uint32(g) % stages * stage_size))

    @cuda.jit(device=True, inline=True)
    def accumulate(o, p, smem, g):
        """Issues o += p v of the block's step g."""
        products_pv(o, p, smem, int32(q_size + uint32(g) % stages * stage_size + N * D))

    @cuda.jit(device=True, inline=True)
    def softmax(s, m, l, rescale, part, key0, row, col, T):
        """s = exp2 of the scaled scores less the new running max m (per half: the rows
        row and row + 8), masked at the diagonal and past T; l and rescale (the old max's
        factor, which o still has to take) updated."""
        # (unsigned 32-bit compares: numba's signed 64-bit ones, with the stage's index
        # and phase from a signed count, took ~30 of the loop's ~330 instructions a warp,
        # call A's ncu)
        end = uint32(key0 + N)
        if end > uint32(row) or end > uint32(T):
            mask(s, row, key0, col, T)
        # A row's max and sum by trees of pairs (call A's ncu: the serial chains' fixed
        # latencies, "stall wait", were a fifth of the loop's cycles); part holds each
        # level's values, in place
        for half in range(2):
            for j in range(pairs):
                part[j] = max(s[4 * j + 2 * half], s[4 * j + 2 * half + 1])
            for level in range(levels):
                width = pairs >> (level + 1)
                for j in range(width):
                    part[j] = max(part[j], part[j + width])
            new_max = max(m[half], quad_max(part[0]) * scale_log2)
            rescale[half] = exp2_ftz(m[half] - new_max)
            for j in range(N // 8):
                for e in range(2):
                    r = 4 * j + 2 * half + e
                    s[r] = exp2_ftz(cuda.fma(s[r], scale_log2, -new_max))
                part[j] = s[4 * j + 2 * half] + s[4 * j + 2 * half + 1]
            for level in range(levels):
                width = pairs >> (level + 1)
                for j in range(width):
                    part[j] += part[j + width]
            m[half], l[half] = new_max, l[half] * rescale[half] + part[0]

    @cuda.jit(device=True, inline=True)
    def rescale_and_pack(o, p, s, rescale):
        """o times the rescale of its rows; p = s as the bf16 A fragments of P v (the
        accumulators of 16 keys, paired, are the A fragment of those 16)."""
        for j in range(D // 8):
            for r in range(4):
                o[4 * j + r] *= rescale[r // 2]
        for r in range(p_regs):
            p[r] = pack_bf16x2(s[2 * r], s[2 * r + 1])

    @cuda.jit(device=True, inline=True)
    def wait_turn(group):
        """Until warpgroup `group` may issue the products of its turn."""
        if pingpong:
            named_barrier(1 + group, 2 * WARPGROUP)

    @cuda.jit(device=True, inline=True)
    def take_turn(group, final):
        """The next warpgroup's turn next, in a ring over the block's tiles (every
        warpgroup takes as many turns a tile): the last warpgroup gives the first its
        first turn at the start, and passes none after its final one, so that every
        arrival at a barrier meets a wait there (a barrier that counts the arrivals of one
        warpgroup twice would complete without the other)."""
        if pingpong and not (group == G - 1 and final):
            named_barrier_arrive(1 + (group + 1) % G, 2 * WARPGROUP)

    @jit(**({} if SIMULATOR else {"launch_bounds": (tile.threads, min_blocks)}))
    def hopper_attention_forward_kernel(out, lse, q, k, v, q_map, k_map, v_map, q_rb, q_rh,
                                        q_ch, kv_rb, kv_rh, kv_ch):
        # out (B, H, T, D) bf16 bits; lse (B, H, T); q, k, v the 2-D matrices the heads
        # are views of, (q_rb, q_rh, q_ch) and (kv_rb, kv_rh, kv_ch) where their heads'
        # rows lie (the module's docstring). A block owns query rows q0 .. q0 + M of a
        # (batch, head): block (x, h, b) the x-th query tile from the last (the longest
        # walks first), or, persistent, the tiles from the x-th of the walk's order on,
        # gridDim.x apart (advance).
        B, H, T = out.shape[0], out.shape[1], out.shape[2]
        # warp-uniform as ptxas sees it: the tile addresses computed from it stay on the
        # uniform datapath, where the wgmma descriptors are read
        group = warp_uniform(cuda.threadIdx.x // WARPGROUP)
        thread = cuda.threadIdx.x % WARPGROUP
        bars = cuda.shared.array(BARRIERS, uint64)
        raw = cuda.shared.array(0, uint16)
        start = int32((SWIZZLE_BYTES - shared_address(raw, 0) % SWIZZLE_BYTES)
                      % SWIZZLE_BYTES // 2)
        smem = raw[start:]
        if cuda.threadIdx.x == 0:
            pipe.init(bars)
            for buf in range(QB):
                mbarrier_init(bars, Q_LANDED + buf, 1)
                mbarrier_init(bars, Q_READ + buf, G)
            fence_barrier_init()
        cuda.syncthreads()

        # the tile walked (query tile, h, b), and the copier's cursor (copy_ahead)
        at = cuda.local.array(3, int32)
        nxt = cuda.local.array(3, int32)
        cur = cuda.local.array(7, int32)
        if persistent:
            at[0], at[1], at[2] = (T + M - 1) // M - 1, 0, 0
            advance(at, cuda.blockIdx.x, H, B)
        else:
            at[0], at[1], at[2] = (cuda.gridDim.x - 1 - cuda.blockIdx.x, cuda.blockIdx.y,
                                   cuda.blockIdx.z)
        for e in range(3):
            cur[e] = at[e]
        for e in range(3, 7):
            cur[e] = 0
        operands = (smem, q, k, v, q_map, k_map, v_map, q_rb, q_rh, q_ch, kv_rb, kv_rh, kv_ch)
        # The producer returns from its own branch, so that ptxas sees the computing code
        # reached only after the registers are raised (setmaxnreg ignored otherwise)
        if producer and group == G:
            if donate:
                lower_registers()
            if cuda.threadIdx.x == copier:
                start_copies(bars, cur, 1 << 30, operands, H, B, T)
            return
        if donate:
            raise_registers()
        if not producer and cuda.threadIdx.x == 0:   # the prologue: the first stages - 1
            start_copies(bars, cur, stages - 1, operands, H, B, T)

        row_in = wgmma_accumulator_row(thread)
        col = accumulator_col(thread)
        s = cuda.local.array(s_regs, float32)
        o = cuda.local.array(o_regs, float32)
        p = cuda.local.array(p_regs, uint32)
        m = cuda.local.array(2, float32)        # running max of the scaled log2 scores
        l = cuda.local.array(2, float32)        # their exp2 summed, this lane's part
        rescale = cuda.local.array(2, float32)
        part = cuda.local.array(pairs, float32)      # softmax's trees
        copies = not producer and cuda.threadIdx.x == 0
        g0 = 0                                   # the block's steps before this tile's
        n = 0                                    # and its tiles
        if group == G - 1:
            take_turn(group, False)              # the first warpgroup's first turn
        while at[0] >= 0:
            h, b = at[1], at[2]
            q0 = at[0] * M
            for e in range(3):
                nxt[e] = at[e]
            if persistent:
                advance(nxt, cuda.gridDim.x, H, B)
            else:
                nxt[0] = -1
            last = nxt[0] < 0
            steps = (min(T, q0 + M) + N - 1) // N
            # The warpgroup's rows first .. first + 63 walk the key steps to the one
            # holding the last of them (a later step of the block's it passes by,
            # releasing it). Per step, software-pipelined: the scores of step it are
            # issued, then the product of step it - 1's P with its v; the softmax of step
            # it runs while that product does.
            first = q0 + 64 * group
            own = (min(T, first + 64) + N - 1) // N
            row = first + row_in
            for r in range(o_regs):
                o[r] = ZERO
            for half in range(2):
                m[half], l[half] = NEG_INF, ZERO
            buf = n % QB
            q_at = int32(buf * M * D + 64 * group * PANEL)
            while not mbarrier_try_wait(bars, Q_LANDED + buf, n // QB % 2):
                pass

            # Without a producer warp thread 0 copies up to the block's step g + stages
            # - 2 in step g, once every warpgroup has released step g - 2 (so that it
            # waits for no warpgroup still at work on step g - 1); three stages keep the
            # copies a step ahead, across tiles too. With ping-pong each warpgroup waits
            # for its turn at its named barrier before it issues products, and passes the
            # turn on after (take_turn).
            pipe.wait(bars, uint32(g0))
            wait_turn(group)
            scores(s, smem, q_at, g0)
            take_turn(group, False)
            if copies:
                copy_ahead(bars, cur, g0 + stages - 1, operands, H, B, T)
            s_wait_all(s)
            softmax(s, m, l, rescale, part, uint32(0), row, col, T)
            # A step's end (the wait for the product of the step before, the release of
            # its stage, the copies, o's rescale and P's packing) runs at the head of the
            # next iteration, past the loop's back edge: ptxas hoists a wgmma wait to the
            # top of its basic block, which put the wait above the softmax (the SASS of
            # session 23), so that no softmax ran under the product it was meant to
            for it in range(1, own):
                # the step's stage and phase from an unsigned count (softmax's comment)
                g = uint32(g0 + it)
                # (unconditional: ptxas serializes every wgmma where a path it cannot
                # rule out reads an accumulator in flight; with none, a no-op)
                o_wait(o)
                if it > 1:
                    if thread == 0:
                        pipe.release(bars, uint32(g - 2))
                    if copies:
                        copy_ahead(bars, cur, g + stages - 2, operands, H, B, T)
                rescale_and_pack(o, p, s, rescale)
                pipe.wait(bars, g)
                wait_turn(group)
                scores(s, smem, q_at, g)
                accumulate(o, p, smem, g - 1)
                take_turn(group, False)
                s_wait_one(s)                    # the scores; the product runs on
                softmax(s, m, l, rescale, part, uint32(it * N), row, col, T)
            o_wait(o)
            if own > 1:
                if thread == 0:
                    pipe.release(bars, uint32(g0 + own - 2))
                if copies:
                    copy_ahead(bars, cur, g0 + own + stages - 2, operands, H, B, T)
            rescale_and_pack(o, p, s, rescale)
            wait_turn(group)
            accumulate(o, p, smem, g0 + own - 1)
            take_turn(group, last and own == steps)
            o_wait(o)
            if thread == 0:
                pipe.release(bars, uint32(g0 + own - 1))
                mbarrier_arrive(bars, Q_READ + buf, 1)
            if copies:
                copy_ahead(bars, cur, g0 + own + stages - 1, operands, H, B, T)
            for it in range(own, steps):
                wait_turn(group)
                take_turn(group, last and it == steps - 1)
                if copies:
                    copy_ahead(bars, cur, g0 + it + stages - 1, operands, H, B, T)
                pipe.wait(bars, uint32(g0 + it))
                if thread == 0:
                    pipe.release(bars, uint32(g0 + it))

            oh = out[b, h]
            for half in range(2):
                total = quad_sum(l[half])
                # a thread's pairs of columns by 4-byte stores (_check_heads: the rows
                # 16-byte aligned), at unsigned indices (numba tests no index for < 0)
                i = uint32(row + 8 * half)
                if i < T:
                    factor = rcp_approx(total)
                    for j in range(D // 8):
                        r = 4 * j + 2 * half
                        store_pair(oh, (i, uint32(8 * j + col)),
                                   pack_bf16x2(o[r] * factor, o[r + 1] * factor))
                    if col == 0:
                        lse[b, h, i] = (m[half] + math.log2(total)) * ln2
            g0 += steps
            n += 1
            for e in range(3):
                at[e] = nxt[e]

    hopper_attention_forward_kernel.whole_program = donate
    return hopper_attention_forward_kernel


_HEADS = types.Array(types.uint16, 4, "A")
_MATRIX = types.Array(types.uint16, 2, "A")
SIGNATURE = ((_HEADS, types.float32[:, :, ::1]) + (_MATRIX,) * 3
             + (types.uint64[::1],) * 3 + (types.int32,) * 6)
# every default tile (short and long T)
PTX_SIGNATURES = [(forward_kernel(D, tile), SIGNATURE)
                  for D, tile in dict.fromkeys((D, default_tile(D, T)) for D in WIDTHS
                                               for T in (1, LONG_T))]


# ----------------------------------------------------------------------------------
# launcher

def supports(D):
    """Whether this forward takes heads of width D (on a Hopper GPU)."""
    return D in WIDTHS


# The shortest T the op sends here: on the H200 (docs/flash-attention.md, call B) this
# forward's default tiles beat mma.sync's at T 1024 and 4096 (D 64) and 2048 (D 128);
# shorter walks were not compared
MIN_T = 1024


def takes(q, k, v):
    """Whether the op runs these heads here: on sm_90, a width of WIDTHS, T at least MIN_T,
    and each a view of a matrix the bulk copies can read (head_matrix)."""
    if SIMULATOR or cuda.get_current_device().compute_capability[0] != 9:
        return False
    return (supports(q.shape[3]) and q.shape[2] >= MIN_T
            and all(head_matrix(x) is not None for x in (q, k, v)))


def hopper_attention_forward(out, lse, q, k, v, *, tile=None, stream=0):
    """out (B, H, T, D) = causal softmax(q k^T / sqrt(D)) v per (batch, head), bf16; lse
    (B, H, T) float32, as flash.flash_attention_forward (which checks the arguments alike:
    ``flash._check_heads``), for D of WIDTHS and heads head_matrix describes. tile: a
    HopperTile, default by D."""
    from .flash import _check_heads

    B, H, T, D = _check_heads(dict(lse=lse), q=q, k=k, v=v, out=out)
    if q.size == 0:
        return
    tile = default_tile(D, T) if tile is None else HopperTile(*tile)
    check_tile(tile, D)
    (qm, q_layout), (km, kv_layout), (vm, v_layout) = (
        described_heads(name, x) for name, x in (("q", q), ("k", k), ("v", v)))
    if kv_layout != v_layout:
        raise ValueError("k and v must lie alike")
    q_map = tensor_map(qm, tile.rows, PANEL)
    k_map, v_map = (tensor_map(x, tile.step, PANEL) for x in (km, vm))
    grid = ((min(ceil_div(T, tile.rows) * H * B, SMS * tile.min_blocks),) if tile.persistent
            else (ceil_div(T, tile.rows), H, B))
    launch_pass(forward_kernel(D, tile), grid, tile.threads, shared_bytes(tile, D), stream,
                (out, lse, qm, km, vm, q_map, k_map, v_map, *q_layout, *kv_layout),
                (out, qm, km, vm), tile.donate)
