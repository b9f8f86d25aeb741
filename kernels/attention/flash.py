"""Flash attention on the tensor cores: causal softmax(q k^T / sqrt(D)) v with bf16 storage
and float32 accumulation, forward and backward (the algorithm of FlashAttention-2). This
module holds the tiles, the device parts the three passes share, the forward and the
launchers' checks; ``flash_backward`` the dq and dk/dv passes.

NumPy twins: ``microgpt.reference.attention_forward`` and ``attention_backward`` on the same
bf16-rounded q, k, v (and dout); the float32 kernels of ``attention`` are the other twin
and the ``--precision fp32`` path. Arguments as there, with bf16 storage: q, k, v, out,
dout, dq, dk, dv (B, H, T, D) hold bf16 in uint16 device arrays, each either its own
array or a view of fused rows (the bf16 step's q, k, v and dq, dk, dv are the three parts
of the QKV rows (B, T, 3C), out and dout the W_O GEMM's rows (B, T, C): no copy splits
or merges the heads; the 16-byte copies take a row pitch); lse (B, H, T) float32 is
the natural-log logsumexp of each row of the scaled scores; the backward's delta (B, H, T)
float32 = rowsum(dout * out) is an output like the gradients: the dq pass writes it, the
dk/dv pass reads it.

How a block works. A block owns `rows` rows of one (batch, head): queries in the forward
and the dq pass, keys in the dk/dv pass; each warp owns 16 or 32 of them (one or two mma
row tiles, which share every fragment of the other side they load), and their mma A
fragments (q, or k and v; dout too in the dq pass) stay in registers for the whole walk.
The other side streams through shared memory `step` rows at a time, by 16-byte cp.async
into one of `stages` buffers while the tensor cores work on another (the GEMM's pipeline,
``pipelines.multistage``: one barrier per step); in the dk/dv pass each step's lse and
delta travel with it, by 4-byte cp.async. Per step each warp computes its 16 x step scores
on mma.sync, keeps them in the accumulator registers, and feeds them straight back as the
A operand of the next product (the accumulator layout of two 16 x 8 tiles is the A
fragment of one 16 x 16: FlashAttention-2's register trick), rounded to bf16 as the tensor
cores take them. Softmax runs in float32 in the log2 domain (exp2 of one FFMA: the score
times log2(e) / sqrt(D) minus the row max); the row max and sum of a 16-row slab are
spread over the 4 lanes that hold a row, combined by two warp shuffles. Only tiles at or
below the diagonal are walked; the one that crosses it (and the one past T) is masked
element by element. A tile's min_blocks sets the launch bounds, which cap the registers of
a thread so that that many blocks fit an SM (the forward's 8-warp blocks: two, at 128
registers).

forward   block = query tile: s = q k^T, online softmax (running max m and sum l, the
          accumulator rescaled by exp2(m_old - m_new) per step), acc += p v; writes out
          = acc / l and lse = (m + log2 l) ln 2.
dq pass   block = query tile: delta = rowsum(dout * out) of its rows (written for the next
          pass), then per key step p = exp2(s - lse), dp = dout v^T, ds = p (dp - delta),
          dq += ds k.
dk/dv     block = key tile, walking the query steps at or below the diagonal: p^T =
pass      exp2(k q^T - lse), dv += p^T dout, dp^T = v dout^T, ds^T = p^T (dp^T - delta),
          dk += ds^T q. Every dq, dk, dv element has one owner: no atomics, deterministic.
The dq pass is separate rather than fused into the dk/dv pass by float32 atomics. Fused
saves recomputing s and dp (two of seven products) for a float32 dq buffer, ds^T through
shared memory, a barrier, atomics and two row passes; built and measured on the H200
(docs/flash-attention.md), it took 2.5x the time of the two passes at andrea-120m.

head_dim D: the mma walks the head dimension padded to the next multiple of 16 (DP), and
a shared tile row holds DS = the next power of two (what the tiles' XOR swizzle permutes);
the copies fill the columns past D with zeros, which add nothing to q k^T and make output
columns that are never written. So every D works on the tensor cores (72: DP 80, DS 128),
D a multiple of 8 by cp.async, others element by element. D is a compile-time constant.
"""
import functools
import math
from typing import NamedTuple

import numpy as np
from numba import cuda, float32, int32, types, uint16, uint32

from ..atoms import exp2_ftz, mma_bf16_16816, opaque, pack_bf16x2, shuffle_xor, to_bf16
from ..cache import jit
from ..common import ceil_div, check_array, device_address
from ..device import (CHUNK, MMA_K, MMA_M, MMA_N, SHARED_ALIGN, SIMULATOR, SM_THREADS,
                      check_block)
from ..layouts.fragments import (a_fragment_loader, accumulator_col, accumulator_row,
                                 b_fragment_loader)
from ..layouts.tiles import tile_copier
from ..pipelines.multistage import multistage
LOG2E = 1.4426950408889634
NEG_INF = np.float32(-np.inf)
INF = np.float32(np.inf)
ZERO = np.float32(0.0)


class FlashTile(NamedTuple):
    """rows: the block's own rows; step: rows of the other side per step; warp_rows: a
    warp's own rows, 16 or 32 (two mma row tiles that share every B fragment loaded);
    min_blocks: blocks per SM that the register allocation must leave room for (the
    launch bounds: 65536 / (threads * min_blocks) registers a thread at most); stages:
    shared buffers of the streamed side, stages - 1 steps in flight while one is read."""
    rows: int
    step: int
    warp_rows: int = MMA_M
    min_blocks: int = 1
    stages: int = 2

    @property
    def threads(self):
        return self.rows // self.warp_rows * 32


# tiles resident for the whole walk, each `rows` x DS: q; q and dout; k and v
RESIDENT = {"forward": 1, "dq": 2, "dkdv": 2}
# float32 statistics per streamed row that travel with its step: the dk/dv pass's lse and
# delta of the step's queries
STATS = {"forward": 0, "dq": 0, "dkdv": 2}
MAX_STAGES = 4


def head_widths(D):
    """(DP, DS): D padded to the mma's 16, and the row length of a shared tile (a power of
    two, so that the swizzle keeps every chunk inside its row)."""
    DP = ceil_div(D, MMA_K) * MMA_K
    return DP, 1 << (DP - 1).bit_length()


def shared_bytes(tile, D, kind):
    return ((RESIDENT[kind] * tile.rows + tile.stages * 2 * tile.step) * head_widths(D)[1] * 2
            + tile.stages * STATS[kind] * tile.step * 4)


def _shared_layout(D, tile, kind):
    """(the block's bf16 array, one stage of it) in elements: the resident tiles, then
    `stages` stages of the streamed side, each a pair of step x DS tiles. With the float32
    statistics (stages x STATS x step) beside it, what check_tile holds to device.SHARED_LIMIT."""
    stage_size = 2 * tile.step * head_widths(D)[1]
    return RESIDENT[kind] * tile.rows * head_widths(D)[1] + tile.stages * stage_size, stage_size


def default_tile(D, kind):
    """The fastest tile of the H200 sweeps (docs/flash-attention.md) for this width of
    shared rows. At D 64 the forward's 8 warps share each k, v step (128 x 64) with
    registers capped for 2 blocks per SM, the backward streams 32 rows a step; at D 32
    (andrea-12m, T 256) 4-warp forward blocks capped for 4 per SM, a dq pass with two
    steps in flight (a walk of at most 4), and a dk/dv pass of 32-row warps; past 64 what
    fits 48 KiB (and, for the dk/dv pass, 255 registers)."""
    DS = head_widths(D)[1]
    if DS <= 32:
        return {"forward": FlashTile(64, 64, 16, 4), "dq": FlashTile(64, 64, stages=3),
                "dkdv": FlashTile(128, 32, 32)}[kind]
    if DS <= 64:
        return {"forward": FlashTile(128, 64, 16, 2), "dq": FlashTile(64, 32),
                "dkdv": FlashTile(64, 32)}[kind]
    return {"forward": FlashTile(64, 32), "dq": FlashTile(32, 32),
            "dkdv": FlashTile(32, 16)}[kind]


def check_tile(tile, D, kind):
    rows, step, warp_rows, min_blocks, stages = tile
    if rows < MMA_M or step < MMA_K or rows % MMA_M or step % MMA_K:
        raise ValueError(f"tile {tile}: rows and step must be positive multiples of 16")
    if warp_rows not in (MMA_M, 2 * MMA_M) or rows % warp_rows:
        raise ValueError(f"tile {tile}: warp_rows must be 16 or 32 and divide rows")
    if not 1 <= min_blocks <= SM_THREADS // tile.threads:
        raise ValueError(f"tile {tile}: min_blocks must be 1 to {SM_THREADS // tile.threads} "
                         f"({SM_THREADS} threads per SM)")
    if not 2 <= stages <= MAX_STAGES:
        raise ValueError(f"tile {tile}: stages must be 2 to {MAX_STAGES}")
    check_block(f"tile {tile} of the {kind} pass with head_dim {D}", tile.threads,
                shared_bytes(tile, D, kind))


def fits(D):
    """Whether the default tiles of all three passes fit head_dim D in shared memory: every
    D up to 128; past it a shared row is 256 wide and no tile does (the float32 kernels of
    kernels/attention/fp32.py take any D)."""
    try:
        for kind in ("forward", "dq", "dkdv"):
            check_tile(default_tile(D, kind), D, kind)
    except ValueError:
        return False
    return True


# ----------------------------------------------------------------------------------
# device parts: tiles in, products on the tensor cores, masks and row reductions

@cuda.jit(device=True, inline=True)
def mma_into(acc, mi, n, a0, a1, a2, a3, b0, b1):
    """acc[mi, n, :] += the 16 x 8 product of one mma (acc: a warp's accumulator tiles,
    mi its row tile)."""
    acc[mi, n, 0], acc[mi, n, 1], acc[mi, n, 2], acc[mi, n, 3] = mma_bf16_16816(
        a0, a1, a2, a3, b0, b1, acc[mi, n, 0], acc[mi, n, 1], acc[mi, n, 2], acc[mi, n, 3])


@cuda.jit(device=True, inline=True)
def quad_max(x):
    """The max over the 4 lanes that hold one row of an accumulator tile."""
    x = max(x, shuffle_xor(x, 1))
    return max(x, shuffle_xor(x, 2))


@cuda.jit(device=True, inline=True)
def quad_sum(x):
    x += shuffle_xor(x, 1)
    return x + shuffle_xor(x, 2)


@cuda.jit(device=True, inline=True)
def pitch(head):
    """The elements from one row of a head (T, D) of bf16 to the next: D, or the width of
    the fused rows it is a view of."""
    return head.strides[0] // 2


class _Parts(NamedTuple):
    copy_own: object
    copy_pair: object
    fragments: object
    scores: object
    accumulate: object
    mask: object


@functools.cache
def _parts(D, tile, keys_are_rows):
    """The device parts of one tile shape. A warp's arrays have a leading axis of WM row
    tiles of 16 (its own rows): fragments (WM, KD, 4), scores (WM, NS, 4), accumulators
    (WM, ND, 4); every B fragment loaded from shared memory feeds all WM of them."""
    DP, DS, KD, ND, NS, WM = _constants(D, tile)
    step = tile.step
    KS = step // MMA_K                         # mma k steps over a step of the other side
    NS2 = NS // 2                              # ldmatrix x4 (16 rows) over a step
    aligned = D % CHUNK == 0
    # A from a tile [m][k]; B = X^T from a tile of X's rows [n][k]; B = X from one [k][n]
    copy_step = tile_copier(step, DS, tile.threads, aligned, width=D)
    a_locate, a_advance, a_load = a_fragment_loader(DS, False)
    bt_locate, bt_advance, bt_load = b_fragment_loader(DS, True)
    b_locate, b_advance, b_load = b_fragment_loader(DS, False)

    @cuda.jit(device=True, inline=True)
    def copy_pair(smem, base, x, y, row0, x_pitch, y_pitch):
        """The step's rows row0 on of x, then of y (each (T, D), rows the pitches apart),
        into the stage at base."""
        copy_step(smem, base, x, row0, 0, x_pitch)
        copy_step(smem, base + step * DS, y, row0, 0, y_pitch)

    @cuda.jit(device=True, inline=True)
    def fragments(frag, smem, base, row):
        """frag (WM, KD, 4): the A fragments of WM x 16 rows from `row` of a tile, over DP."""
        for mi in range(WM):
            at = a_locate(row + mi * MMA_M, 0)
            for kk in range(KD):
                frag[mi, kk, 0], frag[mi, kk, 1], frag[mi, kk, 2], frag[mi, kk, 3] = a_load(
                    smem, int32(base + a_advance(at, kk * MMA_K)))

    # Where a lane's ldmatrix reads in a step's tile: located once per step and 16 rows,
    # through `opaque` (else the compiler hoists every fragment's index out of the key
    # loop, two registers each), the others by fixed moves: 16 columns on XORs the index
    # with 16 (the lane's own chunk is 0 or 1 of a pair, so adding 2 chunks flips bits the
    # swizzle's XOR leaves alone), which keeps the index 32-bit to the ldmatrix; 16 rows on
    # (16 * DS further: the swizzle repeats every 8 rows) added there would not be, numba
    # widening the sum to 64 bits: three instructions an ldmatrix instead of one.
    @cuda.jit(device=True, inline=True)
    def scores(s, frag, smem, base):
        """s (WM, NS, 4) = (the rows whose A fragments are frag) @ (the step's tile)^T."""
        for mi in range(WM):
            for j in range(NS):
                for r in range(4):
                    s[mi, j, r] = ZERO
        at = cuda.local.array(NS2, int32)       # the index of each 16 rows
        for jj in range(NS2):
            at[jj] = opaque(int32(base + 2 * jj * MMA_N * DS + bt_locate(0, 0)))
        for kk in range(KD):
            for j in range(0, NS, 2):
                b0, b1, b2, b3 = bt_load(smem, int32(bt_advance(at[j // 2], kk * MMA_K)))
                for mi in range(WM):
                    a0, a1, a2, a3 = frag[mi, kk, 0], frag[mi, kk, 1], frag[mi, kk, 2], \
                        frag[mi, kk, 3]
                    mma_into(s, mi, j, a0, a1, a2, a3, b0, b1)
                    mma_into(s, mi, j + 1, a0, a1, a2, a3, b2, b3)

    @cuda.jit(device=True, inline=True)
    def accumulate(acc, p, smem, base):
        """acc (WM, ND, 4) += p (accumulators over the step, rounded to bf16) @ the step's
        tile."""
        pa = cuda.local.array((WM, 4), uint32)
        at = opaque(int32(base + b_locate(0, 0)))
        for kk in range(KS):
            for mi in range(WM):
                pa[mi, 0] = pack_bf16x2(p[mi, 2 * kk, 0], p[mi, 2 * kk, 1])
                pa[mi, 1] = pack_bf16x2(p[mi, 2 * kk, 2], p[mi, 2 * kk, 3])
                pa[mi, 2] = pack_bf16x2(p[mi, 2 * kk + 1, 0], p[mi, 2 * kk + 1, 1])
                pa[mi, 3] = pack_bf16x2(p[mi, 2 * kk + 1, 2], p[mi, 2 * kk + 1, 3])
            at_k = b_advance(at, kk * MMA_K)
            for n in range(0, ND, 2):
                b0, b1, b2, b3 = b_load(smem, int32(at_k ^ n * MMA_N))
                for mi in range(WM):
                    mma_into(acc, mi, n, pa[mi, 0], pa[mi, 1], pa[mi, 2], pa[mi, 3], b0, b1)
                    mma_into(acc, mi, n + 1, pa[mi, 0], pa[mi, 1], pa[mi, 2], pa[mi, 3],
                             b2, b3)

    @cuda.jit(device=True, inline=True)
    def mask(s, row, col0, T):
        """-inf where the key lies past the query or past T; row: the thread's first row
        (the others: + 8, + 16, + 24), col0: the step's first column."""
        col = col0 + accumulator_col(cuda.threadIdx.x)
        for mi in range(WM):
            for j in range(NS):
                for r in range(4):
                    i, c = row + mi * MMA_M + 8 * (r // 2), col + j * MMA_N + r % 2
                    if (c < i if keys_are_rows else c > i) or c >= T:
                        s[mi, j, r] = NEG_INF

    return _Parts(tile_copier(tile.rows, DS, tile.threads, aligned, width=D), copy_pair,
                  fragments, scores, accumulate, mask)


def _writer(D, DP):
    ND = DP // MMA_N

    @cuda.jit(device=True, inline=True)
    def write_rows(dst, i, acc, mi, half, factor):
        """dst[i, :D] = row g + 8 * half of the thread's accumulators of row tile mi x
        factor, in bf16."""
        col = accumulator_col(cuda.threadIdx.x)
        for n in range(ND):
            c = n * MMA_N + col
            if c < D:
                dst[i, c] = to_bf16(acc[mi, n, 2 * half] * factor)
            if c + 1 < D:
                dst[i, c + 1] = to_bf16(acc[mi, n, 2 * half + 1] * factor)
    return write_rows


# ----------------------------------------------------------------------------------
# kernels

def _constants(D, tile):
    """(DP, DS, KD, ND, NS, WM): the padded and the shared width of a head row, mma k
    steps and n tiles over DP, n tiles over a step, row tiles of a warp."""
    DP, DS = head_widths(D)
    return DP, DS, DP // MMA_K, DP // MMA_N, tile.step // MMA_N, tile.warp_rows // MMA_M


def _jit(tile):
    """cache.jit with the tile's launch bounds (threads per block, min_blocks per SM): ptxas
    then keeps each thread within 65536 / (threads * min_blocks) registers. The simulator
    has no launch bounds."""
    return jit if SIMULATOR else jit(launch_bounds=(tile.threads, tile.min_blocks))


def _key_pipeline(parts, base, stage_size, tile):
    """The forward's and dq's pipeline over the key steps: the keys and values of step it
    into buffer `stage` of the shared tiles from `base` on (operands: smem, the head's k
    and v, their pitch)."""
    @cuda.jit(device=True, inline=True)
    def copy_keys(stage, it, operands):
        smem, kh, vh, kv = operands
        parts.copy_pair(smem, base + stage * stage_size, kh, vh, it * tile.step, kv, kv)
    return multistage(tile.stages, copy_keys)


@functools.cache
def _forward_kernel(D, tile):
    DP, DS, KD, ND, NS, WM = _constants(D, tile)
    rows, step, warp_rows = tile.rows, tile.step, tile.warp_rows
    parts = _parts(D, tile, False)
    write_rows = _writer(D, DP)
    smem_size, stage_size = _shared_layout(D, tile, "forward")
    scale_log2 = np.float32(LOG2E / math.sqrt(D))
    ln2 = np.float32(math.log(2.0))
    stages = tile.stages
    pipe = _key_pipeline(parts, rows * DS, stage_size, tile)

    @_jit(tile)
    def flash_attention_forward_kernel(out, lse, q, k, v):
        # out, q, k, v (B, H, T, D) bf16 bits; lse (B, H, T). Block (x, h, b) owns query
        # rows q0 .. q0 + rows, the last tiles first (they walk the most keys).
        h, b = cuda.blockIdx.y, cuda.blockIdx.z
        T = q.shape[2]
        q0 = (cuda.gridDim.x - 1 - cuda.blockIdx.x) * rows
        warp_row = cuda.threadIdx.x // 32 * warp_rows
        # this thread's rows: row + 16 mi + 8 half
        row = q0 + warp_row + accumulator_row(cuda.threadIdx.x)
        kh, vh = k[b, h], v[b, h]
        kv = pitch(kh)                      # v's too (the launcher checks): one register
        smem = cuda.shared.array(smem_size, uint16, alignment=SHARED_ALIGN)
        qf = cuda.local.array((WM, KD, 4), uint32)
        s = cuda.local.array((WM, NS, 4), float32)
        acc = cuda.local.array((WM, ND, 4), float32)
        m = cuda.local.array((WM, 2), float32)      # running max of the scaled log2 scores
        l = cuda.local.array((WM, 2), float32)      # their exp2 summed, this lane's part
        for mi in range(WM):
            for n in range(ND):
                for r in range(4):
                    acc[mi, n, r] = ZERO
            for half in range(2):
                m[mi, half], l[mi, half] = NEG_INF, ZERO

        parts.copy_own(smem, 0, q[b, h], q0, 0, pitch(q[b, h]))     # lands with step 0
        steps = (min(T, q0 + rows) + step - 1) // step
        operands = (smem, kh, vh, kv)
        pipe.prologue(steps, operands)
        for it in range(steps):
            pipe.wait()
            if it == 0:
                parts.fragments(qf, smem, 0, warp_row)
            pipe.refill(it, steps, operands)
            key0 = it * step
            k_base = rows * DS + it % stages * stage_size
            parts.scores(s, qf, smem, k_base)
            if key0 + step > q0 or key0 + step > T:
                parts.mask(s, row, key0, T)
            for mi in range(WM):
                for half in range(2):
                    top = NEG_INF
                    for j in range(NS):
                        top = max(top, max(s[mi, j, 2 * half], s[mi, j, 2 * half + 1]))
                    new_max = max(m[mi, half], quad_max(top) * scale_log2)
                    rescale = exp2_ftz(m[mi, half] - new_max)
                    total = l[mi, half] * rescale
                    for j in range(NS):
                        for r in range(2 * half, 2 * half + 2):
                            s[mi, j, r] = exp2_ftz(cuda.fma(s[mi, j, r], scale_log2, -new_max))
                            total += s[mi, j, r]
                    for n in range(ND):
                        acc[mi, n, 2 * half] *= rescale
                        acc[mi, n, 2 * half + 1] *= rescale
                    m[mi, half], l[mi, half] = new_max, total
            parts.accumulate(acc, s, smem, k_base + step * DS)

        oh = out[b, h]
        for mi in range(WM):
            for half in range(2):
                total = quad_sum(l[mi, half])
                i = row + mi * MMA_M + 8 * half
                if i < T:
                    write_rows(oh, i, acc, mi, half, np.float32(1.0) / total)
                    if cuda.threadIdx.x % 4 == 0:
                        lse[b, h, i] = (m[mi, half] + math.log2(total)) * ln2

    return flash_attention_forward_kernel


# head arrays as the bf16 step passes them: views of the fused rows (any layout, "A")
_HEADS = types.Array(types.uint16, 4, "A")
_ROWS3 = types.float32[:, :, ::1]
PTX_WIDTHS = (32, 64, 72)      # the widths compiled ahead: the models', and a padded one
PTX_SIGNATURES = [(_forward_kernel(D, default_tile(D, "forward")),
                   (_HEADS, _ROWS3) + (_HEADS,) * 3) for D in PTX_WIDTHS]


# ----------------------------------------------------------------------------------
# launchers

def _check_heads(rows3, **heads):
    """All head arrays (B, H, T, D) bf16 alike, the per-row arrays (B, H, T) float32;
    returns (B, H, T, D). A head array may be a view whose rows lie apart, as each part
    of the fused QKV rows (B, T, 3C) seen as (B, H, T, D), where the bf16 step leaves
    q, k and v (microgpt.model): a row's D elements next to each other, and when D is a
    multiple of 8 (the 16-byte copies) every row and the first 16-byte aligned."""
    first_name, first = next(iter(heads.items()))
    if len(first.shape) != 4:
        raise ValueError(f"{first_name}: expected shape (B, H, T, D), got {tuple(first.shape)}")
    for name, arr in heads.items():
        check_array(name, arr, first.shape, np.uint16, strided=True)
        D = arr.shape[3]
        if arr.size and arr.strides[3] != 2:
            raise ValueError(f"{name}: a head's row of D elements must be contiguous, got "
                             f"strides {tuple(arr.strides)}")
        if arr.size and D % CHUNK == 0 and (
                any(stride % 16 for stride in arr.strides[:3]) or device_address(arr) % 16):
            raise ValueError(f"{name}: the rows of a view must start 16-byte aligned (for "
                             f"the 16-byte copies), got strides {tuple(arr.strides)}")
    if "k" in heads and heads["k"].strides != heads["v"].strides:
        raise ValueError("k and v must lie alike (both arrays of their own, or both parts "
                         f"of the same fused rows), got strides {tuple(heads['k'].strides)} "
                         f"and {tuple(heads['v'].strides)}")
    for name, arr in rows3.items():
        check_array(name, arr, first.shape[:3])
    return first.shape


def _tile(tile, D, kind):
    tile = default_tile(D, kind) if tile is None else FlashTile(*tile)
    check_tile(tile, D, kind)
    return tile


def flash_attention_forward(out, lse, q, k, v, *, tile=None, stream=0):
    """out (B, H, T, D) = causal softmax(q k^T / sqrt(D)) v per (batch, head), bf16; lse
    (B, H, T) float32 = each row's logsumexp of the scaled scores. tile: a FlashTile
    (query rows per block, keys per step), default by D."""
    B, H, T, D = _check_heads(dict(lse=lse), q=q, k=k, v=v, out=out)
    if q.size == 0:
        return
    tile = _tile(tile, D, "forward")
    _forward_kernel(D, tile)[(ceil_div(T, tile.rows), H, B), tile.threads, stream](
        out, lse, q, k, v)

