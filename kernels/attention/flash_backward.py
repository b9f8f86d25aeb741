"""Flash attention's backward on the mma.sync tensor cores (bf16): the dq pass by query tiles
(which also writes delta = rowsum(dout * out)), then the dk/dv pass by key tiles, built
from ``flash``'s tiles and device parts (how a block works and the passes' algorithm:
``flash``'s docstring).

NumPy twin: ``microgpt.reference.attention_backward`` on the same bf16-rounded inputs.
"""
import functools
import math

import numpy as np
from numba import cuda, float32, int32, int64, uint16, uint32

from ..atoms import bits_to_float32, cp_async_4, exp2_ftz
from ..common import ceil_div
from ..device import MMA_M, MMA_N, SHARED_ALIGN
from ..layouts.fragments import accumulator_col, accumulator_row
from ..pipelines.multistage import multistage
from .flash import (_HEADS, _ROWS3, INF, LOG2E, PTX_WIDTHS, STATS, ZERO, _check_heads,
                    _constants, _jit, _key_pipeline, _parts, _shared_layout, _tile, _writer,
                    default_tile, pitch, quad_sum)


@cuda.jit(device=True, inline=True)
def bf16_value(bits):
    return bits_to_float32(uint32(bits) << 16)


@functools.cache
def _dq_kernel(D, tile):
    DP, DS, KD, ND, NS, WM = _constants(D, tile)
    rows, step, warp_rows = tile.rows, tile.step, tile.warp_rows
    parts = _parts(D, tile, False)
    write_rows = _writer(D, DP)
    smem_size, stage_size = _shared_layout(D, tile, "dq")
    scale = np.float32(1.0 / math.sqrt(D))
    scale_log2 = np.float32(LOG2E / math.sqrt(D))
    log2e = np.float32(LOG2E)
    stages = tile.stages
    pipe = _key_pipeline(parts, 2 * rows * DS, stage_size, tile)

    @_jit(tile)
    def flash_attention_backward_dq_kernel(dq, delta, dout, q, k, v, out, lse):
        # dq, dout, q, k, v, out (B, H, T, D) bf16 bits; delta, lse (B, H, T): delta is
        # written. Block (x, h, b) owns query rows q0 .. q0 + rows, the last first.
        h, b = cuda.blockIdx.y, cuda.blockIdx.z
        T = q.shape[2]
        q0 = (cuda.gridDim.x - 1 - cuda.blockIdx.x) * rows
        warp_row = cuda.threadIdx.x // 32 * warp_rows
        lane4 = cuda.threadIdx.x % 4
        row = q0 + warp_row + accumulator_row(cuda.threadIdx.x)
        kh, vh, doh, oh = k[b, h], v[b, h], dout[b, h], out[b, h]
        kv = pitch(kh)
        smem = cuda.shared.array(smem_size, uint16, alignment=SHARED_ALIGN)
        qf = cuda.local.array((WM, KD, 4), uint32)
        dof = cuda.local.array((WM, KD, 4), uint32)
        s = cuda.local.array((WM, NS, 4), float32)
        dp = cuda.local.array((WM, NS, 4), float32)
        acc = cuda.local.array((WM, ND, 4), float32)
        row_lse = cuda.local.array((WM, 2), float32)    # log2 domain; +inf past T: p = 0
        row_delta = cuda.local.array((WM, 2), float32)
        for mi in range(WM):
            for n in range(ND):
                for r in range(4):
                    acc[mi, n, r] = ZERO

        parts.copy_own(smem, 0, q[b, h], q0, 0, pitch(q[b, h]))     # land with step 0
        parts.copy_own(smem, rows * DS, doh, q0, 0, pitch(doh))
        steps = (min(T, q0 + rows) + step - 1) // step
        operands = (smem, kh, vh, kv)
        pipe.prologue(steps, operands)
        # delta of the thread's rows while the copies fly: the 4 lanes of a row split it
        for mi in range(WM):
            for half in range(2):
                i = row + mi * MMA_M + 8 * half
                part = ZERO
                if i < T:
                    for c in range(lane4, D, 4):
                        part += bf16_value(doh[i, c]) * bf16_value(oh[i, c])
                row_delta[mi, half] = quad_sum(part)
                row_lse[mi, half] = lse[b, h, i] * log2e if i < T else INF
                if i < T and lane4 == 0:
                    delta[b, h, i] = row_delta[mi, half]

        for it in range(steps):
            pipe.wait()
            if it == 0:
                parts.fragments(qf, smem, 0, warp_row)
                parts.fragments(dof, smem, rows * DS, warp_row)
            pipe.refill(it, steps, operands)
            key0 = it * step
            k_base = 2 * rows * DS + it % stages * stage_size
            parts.scores(s, qf, smem, k_base)
            if key0 + step > q0 or key0 + step > T:
                parts.mask(s, row, key0, T)
            parts.scores(dp, dof, smem, k_base + step * DS)        # dout v^T
            for mi in range(WM):
                for j in range(NS):
                    for r in range(4):
                        p = exp2_ftz(cuda.fma(s[mi, j, r], scale_log2, -row_lse[mi, r // 2]))
                        dp[mi, j, r] = p * (dp[mi, j, r] - row_delta[mi, r // 2])
            parts.accumulate(acc, dp, smem, k_base)                # dq += ds k

        dqh = dq[b, h]
        for mi in range(WM):
            for half in range(2):
                i = row + mi * MMA_M + 8 * half
                if i < T:
                    write_rows(dqh, i, acc, mi, half, scale)

    return flash_attention_backward_dq_kernel


@functools.cache
def _dkdv_kernel(D, tile):
    DP, DS, KD, ND, NS, WM = _constants(D, tile)
    rows, step, warp_rows = tile.rows, tile.step, tile.warp_rows
    parts = _parts(D, tile, True)
    write_rows = _writer(D, DP)
    smem_size, stage_size = _shared_layout(D, tile, "dkdv")
    scale = np.float32(1.0 / math.sqrt(D))
    scale_log2 = np.float32(LOG2E / math.sqrt(D))
    log2e = np.float32(LOG2E)
    stages, threads = tile.stages, tile.threads
    stats_size = stages * STATS["dkdv"] * step
    stats_copies = ceil_div(STATS["dkdv"] * step, threads)     # 4-byte copies a thread

    @cuda.jit(device=True, inline=True)
    def copy_queries(stage, it, operands):
        """The rows of query step it (of this block's) of q and dout into stage `stage` of
        smem, their lse and delta into stats (stages x (lse, delta) x step); zeros past T,
        where the mask zeroes p. Statistics in shared memory: loaded into registers at each
        step instead, their global latency would fall between the scores and the
        exponentials."""
        smem, stats, qh, doh, lse_h, delta_h, first = operands
        row0 = (first + it) * step
        parts.copy_pair(smem, 2 * rows * DS + stage * stage_size, qh, doh, row0, pitch(qh),
                        pitch(doh))
        T = lse_h.shape[0]
        for i in range(stats_copies):
            e = cuda.threadIdx.x + i * threads
            c = row0 + e % step
            at, size = (int64(c), uint32(4)) if c < T else (int64(0), uint32(0))
            if e < step:
                cp_async_4(stats, int32(stage * 2 * step + e), lse_h, at, size)
            elif e < 2 * step:
                cp_async_4(stats, int32(stage * 2 * step + e), delta_h, at, size)

    pipe = multistage(stages, copy_queries)

    @_jit(tile)
    def flash_attention_backward_dkdv_kernel(dk, dv, dout, q, k, v, lse, delta):
        # dk, dv, dout, q, k, v (B, H, T, D) bf16 bits; lse, delta (B, H, T). Block
        # (x, h, b) owns key rows k0 .. k0 + rows, the first first (they walk the most
        # queries), and the query steps from the one holding k0 to T.
        h, b = cuda.blockIdx.y, cuda.blockIdx.z
        T = q.shape[2]
        k0 = cuda.blockIdx.x * rows
        warp_row = cuda.threadIdx.x // 32 * warp_rows
        col = accumulator_col(cuda.threadIdx.x)
        row = k0 + warp_row + accumulator_row(cuda.threadIdx.x)
        qh, doh, lse_h, delta_h = q[b, h], dout[b, h], lse[b, h], delta[b, h]
        smem = cuda.shared.array(smem_size, uint16, alignment=SHARED_ALIGN)
        stats = cuda.shared.array(stats_size, float32)
        kf = cuda.local.array((WM, KD, 4), uint32)
        vf = cuda.local.array((WM, KD, 4), uint32)
        s = cuda.local.array((WM, NS, 4), float32)
        dp = cuda.local.array((WM, NS, 4), float32)
        dk_acc = cuda.local.array((WM, ND, 4), float32)
        dv_acc = cuda.local.array((WM, ND, 4), float32)
        col_lse = cuda.local.array((NS, 2), float32)
        col_delta = cuda.local.array((NS, 2), float32)
        for mi in range(WM):
            for n in range(ND):
                for r in range(4):
                    dk_acc[mi, n, r] = ZERO
                    dv_acc[mi, n, r] = ZERO

        first = k0 // step
        parts.copy_own(smem, 0, k[b, h], k0, 0, pitch(k[b, h]))
        parts.copy_own(smem, rows * DS, v[b, h], k0, 0, pitch(v[b, h]))
        steps = (T + step - 1) // step - first
        operands = (smem, stats, qh, doh, lse_h, delta_h, first)
        pipe.prologue(steps, operands)
        for it in range(steps):
            query0 = (first + it) * step
            pipe.wait()
            if it == 0:
                parts.fragments(kf, smem, 0, warp_row)
                parts.fragments(vf, smem, rows * DS, warp_row)
            pipe.refill(it, steps, operands)
            stage = it % stages
            # the step's columns' lse (to the log2 domain) and delta; unsigned indices, which
            # numba does not test for negative values
            at = uint32(stage * 2 * step + col)
            for j in range(NS):
                for r in range(2):
                    col_lse[j, r] = stats[at + uint32(j * MMA_N + r)] * log2e
                    col_delta[j, r] = stats[at + uint32(step + j * MMA_N + r)]
            q_base = 2 * rows * DS + stage * stage_size
            parts.scores(s, kf, smem, q_base)                       # k q^T
            # the diagonal, and the step past T, whose staged lse is 0 there, not +inf
            if query0 < k0 + rows or query0 + step > T:
                parts.mask(s, row, query0, T)
            for mi in range(WM):
                for j in range(NS):
                    for r in range(4):
                        s[mi, j, r] = exp2_ftz(
                            cuda.fma(s[mi, j, r], scale_log2, -col_lse[j, r % 2]))
            parts.accumulate(dv_acc, s, smem, q_base + step * DS)  # dv += p^T dout
            parts.scores(dp, vf, smem, q_base + step * DS)          # v dout^T
            for mi in range(WM):
                for j in range(NS):
                    for r in range(4):
                        dp[mi, j, r] = s[mi, j, r] * (dp[mi, j, r] - col_delta[j, r % 2])
            parts.accumulate(dk_acc, dp, smem, q_base)              # dk += ds^T q

        dkh, dvh = dk[b, h], dv[b, h]
        for mi in range(WM):
            for half in range(2):
                i = row + mi * MMA_M + 8 * half
                if i < T:
                    write_rows(dkh, i, dk_acc, mi, half, scale)
                    write_rows(dvh, i, dv_acc, mi, half, np.float32(1.0))

    return flash_attention_backward_dkdv_kernel


PTX_SIGNATURES = [
    entry
    for D in PTX_WIDTHS
    for entry in [
        (_dq_kernel(D, default_tile(D, "dq")), (_HEADS, _ROWS3) + (_HEADS,) * 5 + (_ROWS3,)),
        (_dkdv_kernel(D, default_tile(D, "dkdv")), (_HEADS,) * 6 + (_ROWS3,) * 2),
    ]
]


# ----------------------------------------------------------------------------------
# launcher


def flash_attention_backward(dq, dk, dv, delta, dout, q, k, v, out, lse, *,
                             tiles=(None, None), stream=0):
    """dq, dk, dv (B, H, T, D) bf16 and delta (B, H, T) float32 = rowsum(dout * out),
    overwritten, from dout and the forward's q, k, v, out and lse. Two launches: dq by
    query tiles (writing delta), then dk and dv by key tiles (reading it); tiles: their
    FlashTiles."""
    B, H, T, D = _check_heads(dict(lse=lse, delta=delta), q=q, k=k, v=v, out=out, dout=dout,
                              dq=dq, dk=dk, dv=dv)
    if q.size == 0:
        return
    dq_tile, dkdv_tile = _tile(tiles[0], D, "dq"), _tile(tiles[1], D, "dkdv")
    _dq_kernel(D, dq_tile)[(ceil_div(T, dq_tile.rows), H, B), dq_tile.threads, stream](
        dq, delta, dout, q, k, v, out, lse)
    _dkdv_kernel(D, dkdv_tile)[(ceil_div(T, dkdv_tile.rows), H, B), dkdv_tile.threads,
                               stream](dk, dv, dout, q, k, v, lse, delta)
