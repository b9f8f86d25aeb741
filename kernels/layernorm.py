"""LayerNorm over the last axis of (N, C) rows, forward and backward, and the residual
add fused into the forward.

NumPy twins: ``microgpt.reference.layernorm_forward``, ``layernorm_backward`` and
``residual_layernorm_forward``.

Forward: one warp per row, a block of several. Two warp reductions (the mean, then the
variance of the centred row, which is more accurate than E[x^2] - mean^2), then the
normalised, scaled and shifted row; mean and rstd are saved for the backward. Re-reading
the row hits L1. A warp per row needs no block barrier, so a block's rows proceed
independently and an SM holds up to 64 rows in flight (a block per row, as before, waited
on two block reductions per row and held 16).

Residual + LayerNorm forward: the same, on the sum a + b of two rows (the residual
stream and a block's branch), which it writes out as the next residual stream; the sum
stays in shared memory (C floats per warp) for the statistics and the normalisation, so a
and b are read once and no second launch re-reads the sum. The backward of the residual
add is the identity into both of its inputs, so this op's backward is
``layernorm_backward`` accumulating into the residual stream's gradient, as the model's
is.

Backward, fused into one launch: a block owns a chunk of rows_per_block rows, its warps a
row each at a time. Per row a warp reduces sum(dxhat) and sum(dxhat * xhat) and adds the
row's input gradient into dinp; meanwhile each warp accumulates dweight and dbias for its
rows in its own part of the block's (dynamic) shared memory (2C floats per warp: no
atomics, no barrier), and at the end the block adds the warps' parts and adds that with
one global atomic per column: N / rows_per_block atomics per element of dweight and dbias
instead of N. (Shared atomics into one (2C,) part, the first version, left the andrea-120m
backward as slow as the block-per-row kernel it replaced.)

Where a pass both reads and writes global memory per column (the residual forward's sum,
the backward's dinp), a lane reads UNROLL columns before it writes the first: a store
between two loads keeps the second from issuing until the first has come back, which left
one load per lane in flight.

Mixed precision: `out` (forward) and `dout` (backward) may be bf16 (uint16 arrays, see
``kernels/precision.py``), since the forward's output is a GEMM operand and the backward's
dout a GEMM result; and the backward can write a bf16 copy of the accumulated dinp, the
operand of the GEMMs that read the residual stream's gradient next. Statistics, sums and
dinp itself stay float32.
"""
import functools
import math

import numpy as np
from numba import cuda, float32, int64, uint16

from microgpt.kernels.common import (REDUCE_SCRATCH, WARP, ceil_div, check_array,
                                     check_block_size, check_not_empty, row_block, warp_sum)
from microgpt.kernels.precision import check_activation, load_float32, store_float32
from microgpt.reference import LN_EPS as _LN_EPS

LN_EPS = np.float32(_LN_EPS)
ZERO = np.float32(0.0)
ONE = np.float32(1.0)
UNROLL = 4       # a lane's columns read together where the pass also writes to global

FORWARD_BLOCK = 256        # 8 rows at a time
BACKWARD_BLOCK = 256
ROWS_PER_BLOCK = 16        # 2 per warp at the default block
FLOAT32_BYTES = 4
# the shared memory a block may use without the driver's opt-in (48 KiB, static and
# dynamic together), less the block reduction's static scratch (WARP floats on a GPU)
MAX_DYNAMIC_SHARED_BYTES = 48 * 1024 - WARP * FLOAT32_BYTES


# ----------------------------------------------------------------------------------
# kernels: a warp per row, its lanes on the columns lane, lane + 32, ...; a row past the
# last (the grid's tail) computes nothing but still calls the warp sums (their simulator
# twin synchronises the block)

@cuda.jit(device=True, inline=True)
def _warp_row():
    """(this warp's row, this lane) of a block of blockDim.x // WARP rows."""
    tid = cuda.threadIdx.x
    return cuda.blockIdx.x * (cuda.blockDim.x // WARP) + tid // WARP, tid % WARP


@cuda.jit(device=True, inline=True)
def _normalise_row(out, mean, rstd, row, x, row_mean, weight, bias, scratch):
    """The forward after the mean: the variance of the centred row x (a row of the input,
    or the fused sum in shared memory; no columns on a tail warp), then out[row] and the
    statistics. Every lane of the warp calls."""
    lane = cuda.threadIdx.x % WARP
    C = weight.shape[0]
    partial = float32(0.0)
    for c in range(lane, x.shape[0], WARP):
        centred = x[c] - row_mean
        partial += centred * centred
    row_rstd = ONE / math.sqrt(warp_sum(partial, scratch) / float32(C) + LN_EPS)

    for c in range(lane, x.shape[0], WARP):
        store_float32(out, (row, c), (x[c] - row_mean) * row_rstd * weight[c] + bias[c])
    if lane == 0 and x.shape[0] > 0:
        mean[row] = row_mean
        rstd[row] = row_rstd


@cuda.jit
def _layernorm_forward_kernel(out, mean, rstd, inp, weight, bias):
    # out (N, C) float32 or bf16, mean (N,), rstd (N,), inp (N, C), weight (C,), bias (C,);
    # warp = row
    scratch = cuda.shared.array(REDUCE_SCRATCH, float32)
    row, lane = _warp_row()
    N, C = inp.shape
    x = inp[min(row, N - 1), :C if row < N else 0]
    partial = float32(0.0)
    for c in range(lane, x.shape[0], WARP):
        partial += x[c]
    row_mean = warp_sum(partial, scratch) / float32(C)
    _normalise_row(out, mean, rstd, row, x, row_mean, weight, bias, scratch)


@cuda.jit
def _residual_layernorm_forward_kernel(resid, out, mean, rstd, a, b, weight, bias):
    # resid (N, C) = a + b, out (N, C) float32 or bf16 = layernorm(resid) * weight + bias,
    # mean (N,), rstd (N,), a (N, C), b (N, C), weight (C,), bias (C,); warp = row
    scratch = cuda.shared.array(REDUCE_SCRATCH, float32)
    # dynamic shared memory (warps, C): each warp's row sum; column c is lane c % 32's
    # alone, so no barrier guards it
    row_sums = cuda.shared.array(0, float32)
    row, lane = _warp_row()
    N, C = a.shape
    first = (cuda.threadIdx.x // WARP) * C
    x = row_sums[first:first + (C if row < N else 0)]
    partial = float32(0.0)
    # UNROLL columns at a time, read before the first is written (a store to resid
    # between two reads would hold the second until the first came back)
    a_cols = cuda.local.array(UNROLL, float32)
    b_cols = cuda.local.array(UNROLL, float32)
    for chunk in range(lane, x.shape[0], UNROLL * WARP):
        for k in range(UNROLL):
            c = chunk + k * WARP
            a_cols[k] = a[row, c] if c < x.shape[0] else ZERO
            b_cols[k] = b[row, c] if c < x.shape[0] else ZERO
        for k in range(UNROLL):
            c = chunk + k * WARP
            if c < x.shape[0]:
                value = a_cols[k] + b_cols[k]
                resid[row, c] = value
                x[c] = value
                partial += value
    row_mean = warp_sum(partial, scratch) / float32(C)
    _normalise_row(out, mean, rstd, row, x, row_mean, weight, bias, scratch)


@functools.cache
def _layernorm_backward_kernel(write_copy):
    """write_copy: also write dinp's new value, rounded to bf16, into dinp_copy."""
    @cuda.jit
    def layernorm_backward_kernel(dinp, dinp_copy, dweight, dbias, dout, inp, weight, mean,
                                  rstd, rows_per_block):
        # dinp (N, C) +=, dinp_copy (N, C) bf16 (when write_copy), dweight (C,) +=,
        # dbias (C,) +=, dout (N, C) float32 or bf16, inp (N, C), weight (C,), mean (N,),
        # rstd (N,); block = rows [blockIdx * rows_per_block, ...), a warp per row at a time
        scratch = cuda.shared.array(REDUCE_SCRATCH, float32)
        # dynamic shared memory (warps, 2C): each warp's dweight partials [0, C) and dbias
        # partials [C, 2C); column c of a warp's is its lane c % 32's alone, so no barrier
        # guards them until the block adds them up
        shared = cuda.shared.array(0, float32)
        tid, n_threads = cuda.threadIdx.x, cuda.blockDim.x
        warp, lane, n_warps = tid // WARP, tid % WARP, n_threads // WARP
        N, C = inp.shape
        partials = shared[warp * 2 * C:(warp + 1) * 2 * C]
        xs = cuda.local.array(UNROLL, float32)
        dys = cuda.local.array(UNROLL, float32)
        olds = cuda.local.array(UNROLL, float32)
        weights = cuda.local.array(UNROLL, float32)
        for c in range(lane, C, WARP):
            partials[c] = float32(0.0)
            partials[C + c] = float32(0.0)

        first_row = cuda.blockIdx.x * rows_per_block
        last_row = min(first_row + rows_per_block, N)
        for warp_rows in range(first_row, last_row, n_warps):
            row = warp_rows + warp
            n_cols = C if row < last_row else 0
            row = min(row, N - 1)
            row_mean, row_rstd = mean[row], rstd[row]
            sum_dxhat = float32(0.0)
            sum_dxhat_xhat = float32(0.0)
            for c in range(lane, n_cols, WARP):
                dy = load_float32(dout, (row, c))
                xhat = (inp[row, c] - row_mean) * row_rstd
                dxhat = dy * weight[c]
                sum_dxhat += dxhat
                sum_dxhat_xhat += dxhat * xhat
                partials[c] += dy * xhat
                partials[C + c] += dy
            mean_dxhat = warp_sum(sum_dxhat, scratch) / float32(C)
            mean_dxhat_xhat = warp_sum(sum_dxhat_xhat, scratch) / float32(C)
            # UNROLL columns at a time, read before the first is written (as in the
            # residual forward: a store to dinp would hold the next column's reads)
            for chunk in range(lane, n_cols, UNROLL * WARP):
                for k in range(UNROLL):
                    c = chunk + k * WARP
                    if c < n_cols:
                        xs[k] = inp[row, c]
                        dys[k] = load_float32(dout, (row, c))
                        olds[k] = dinp[row, c]
                        weights[k] = weight[c]
                for k in range(UNROLL):
                    c = chunk + k * WARP
                    if c < n_cols:
                        xhat = (xs[k] - row_mean) * row_rstd
                        dxhat = dys[k] * weights[k]
                        total = olds[k] + row_rstd * (dxhat - mean_dxhat
                                                      - xhat * mean_dxhat_xhat)
                        dinp[row, c] = total
                        if write_copy:
                            store_float32(dinp_copy, (row, c), total)

        cuda.syncthreads()
        for c in range(tid, C, n_threads):
            dw, db = float32(0.0), float32(0.0)
            for w in range(n_warps):
                dw += shared[w * 2 * C + c]
                db += shared[w * 2 * C + C + c]
            cuda.atomic.add(dweight, c, dw)
            cuda.atomic.add(dbias, c, db)
    return layernorm_backward_kernel


_ROWS, _VECTOR, _BF16_ROWS = float32[:, ::1], float32[::1], uint16[:, ::1]
PTX_SIGNATURES = [
    (_layernorm_forward_kernel, (_ROWS, _VECTOR, _VECTOR, _ROWS, _VECTOR, _VECTOR)),
    (_layernorm_forward_kernel, (_BF16_ROWS, _VECTOR, _VECTOR, _ROWS, _VECTOR, _VECTOR)),
    (_residual_layernorm_forward_kernel, (_ROWS, _ROWS, _VECTOR, _VECTOR, _ROWS, _ROWS,
                                          _VECTOR, _VECTOR)),
    (_residual_layernorm_forward_kernel, (_ROWS, _BF16_ROWS, _VECTOR, _VECTOR, _ROWS, _ROWS,
                                          _VECTOR, _VECTOR)),
    (_layernorm_backward_kernel(False), (_ROWS, _ROWS, _VECTOR, _VECTOR, _ROWS, _ROWS,
                                         _VECTOR, _VECTOR, _VECTOR, int64)),
    (_layernorm_backward_kernel(True), (_ROWS, _BF16_ROWS, _VECTOR, _VECTOR, _BF16_ROWS,
                                        _ROWS, _VECTOR, _VECTOR, _VECTOR, int64)),
]


# ----------------------------------------------------------------------------------
# launchers

def _check_rows(inp, weight, mean, rstd, inp_name="inp"):
    """The shapes every pass shares; returns (N, C)."""
    if len(inp.shape) != 2:
        raise ValueError(f"{inp_name}: expected shape (N, C), got {tuple(inp.shape)}")
    N, C = inp.shape
    check_not_empty("C", C)
    check_array(inp_name, inp, (N, C))
    check_array("weight", weight, (C,))
    check_array("mean", mean, (N,))
    check_array("rstd", rstd, (N,))
    return N, C


def _block(block, rows, cap):
    """The launch's block: as given (whole warps), or by default a warp per row, up to cap
    threads and no more warps than rows."""
    block = row_block(rows * WARP, cap) if block is None else block
    check_block_size(block, WARP)
    return block


def _check_shared_bytes(op, C, floats_per_column):
    """The dynamic shared memory a launch of op needs for rows of C, checked; returns it."""
    shared_bytes = floats_per_column * C * FLOAT32_BYTES
    if shared_bytes > MAX_DYNAMIC_SHARED_BYTES:
        raise ValueError(f"{op}: C = {C} needs {shared_bytes} bytes of shared memory, more "
                         f"than the {MAX_DYNAMIC_SHARED_BYTES} a block has beside its "
                         "reduction scratch")
    return shared_bytes


def layernorm_forward(out, mean, rstd, inp, weight, bias, *, stream=0, block=None):
    """out (N, C) = layernorm(inp (N, C)) * weight (C,) + bias (C,), eps 1e-5; writes the
    row statistics mean (N,) and rstd (N,) for the backward. out is float32 or bf16."""
    N, C = _check_rows(inp, weight, mean, rstd)
    check_activation("out", out, (N, C))
    block = _block(block, N, FORWARD_BLOCK)
    check_array("bias", bias, (C,))
    if N == 0:
        return
    _layernorm_forward_kernel[ceil_div(N, block // WARP), block, stream](
        out, mean, rstd, inp, weight, bias)


def residual_layernorm_forward(resid, out, mean, rstd, a, b, weight, bias, *, stream=0,
                               block=None):
    """resid (N, C) = a (N, C) + b (N, C), and out (N, C) = layernorm(resid) * weight (C,)
    + bias (C,) with its statistics mean (N,) and rstd (N,), in one launch. out is float32
    or bf16; its backward is layernorm_backward into the gradient of resid."""
    N, C = _check_rows(a, weight, mean, rstd, inp_name="a")
    check_array("b", b, (N, C))
    check_array("resid", resid, (N, C))
    check_activation("out", out, (N, C))
    check_array("bias", bias, (C,))
    # by default as many warps (rows) as the shared row sums leave room for
    fitting = max(1, MAX_DYNAMIC_SHARED_BYTES // (C * FLOAT32_BYTES)) * WARP
    block = _block(block, N, min(FORWARD_BLOCK, fitting))
    shared_bytes = _check_shared_bytes(f"residual_layernorm_forward with {block} threads",
                                       C, block // WARP)
    if N == 0:
        return
    _residual_layernorm_forward_kernel[ceil_div(N, block // WARP), block, stream,
                                       shared_bytes](resid, out, mean, rstd, a, b, weight, bias)


def layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, *, dinp_copy=None,
                       stream=0, block=None, rows_per_block=ROWS_PER_BLOCK):
    """dinp (N, C), dweight (C,) and dbias (C,) += the gradients of the forward given dout
    (N, C); all three accumulate (dinp is the residual stream's gradient). dout is float32
    or bf16; dinp_copy (N, C), when given, is bf16 and receives dinp's new value rounded."""
    N, C = _check_rows(inp, weight, mean, rstd)
    check_array("dinp", dinp, (N, C))
    check_activation("dout", dout, (N, C))
    if dinp_copy is not None:
        check_array("dinp_copy", dinp_copy, (N, C), np.uint16)
    check_array("dweight", dweight, (C,))
    check_array("dbias", dbias, (C,))
    if rows_per_block < 1:
        raise ValueError(f"rows_per_block must be at least 1, got {rows_per_block}")
    # by default as many warps (rows at a time) as their partials leave room for
    fitting = max(1, MAX_DYNAMIC_SHARED_BYTES // (2 * C * FLOAT32_BYTES)) * WARP
    block = _block(block, min(N, rows_per_block), min(BACKWARD_BLOCK, fitting))
    shared_bytes = _check_shared_bytes(f"layernorm_backward with {block} threads", C,
                                       2 * (block // WARP))
    if N == 0:
        return
    kernel = _layernorm_backward_kernel(dinp_copy is not None)
    kernel[ceil_div(N, rows_per_block), block, stream, shared_bytes](
        dinp, dinp if dinp_copy is None else dinp_copy, dweight, dbias, dout, inp, weight,
        mean, rstd, rows_per_block)
