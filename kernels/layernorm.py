"""LayerNorm over the last axis of (N, C) rows, forward and backward.

NumPy twins: ``microgpt.reference.layernorm_forward`` and ``layernorm_backward``.

Forward: one block per row. Two block reductions (the mean, then the variance of the
centred row, which is more accurate than E[x^2] - mean^2), then the normalised, scaled and
shifted row; mean and rstd are saved for the backward. Re-reading the row hits L1.

Backward, fused into one launch: a block owns a chunk of rows_per_block rows. Per row it
reduces sum(dxhat) and sum(dxhat * xhat) over the block and adds the row's input gradient
into dinp; meanwhile each thread accumulates dweight and dbias for the columns it owns in
(dynamic) shared memory, and at the end the block adds its partial sums with one atomic
per column: N / rows_per_block atomics per element of dweight and dbias instead of N.
"""
import math

import numpy as np
from numba import cuda, float32, int64

from microgpt.kernels.common import (REDUCE_SCRATCH, WARP, ceil_div, check_array,
                                     check_block_size, check_not_empty, block_sum, row_block)
from microgpt.reference import LN_EPS as _LN_EPS

LN_EPS = np.float32(_LN_EPS)
ONE = np.float32(1.0)

FORWARD_BLOCK = 128
BACKWARD_BLOCK = 256
ROWS_PER_BLOCK = 32
MAX_SHARED_BYTES = 48 * 1024     # static + dynamic shared memory without an opt-in
_SCRATCH_BYTES = REDUCE_SCRATCH * np.dtype(np.float32).itemsize   # the static part


# ----------------------------------------------------------------------------------
# kernels

@cuda.jit
def _layernorm_forward_kernel(out, mean, rstd, inp, weight, bias):
    # out (N, C), mean (N,), rstd (N,), inp (N, C), weight (C,), bias (C,); block = row
    scratch = cuda.shared.array(REDUCE_SCRATCH, float32)
    row = cuda.blockIdx.x
    tid, n_threads = cuda.threadIdx.x, cuda.blockDim.x
    C = inp.shape[1]

    partial = float32(0.0)
    for c in range(tid, C, n_threads):
        partial += inp[row, c]
    row_mean = block_sum(partial, scratch) / float32(C)

    partial = float32(0.0)
    for c in range(tid, C, n_threads):
        centred = inp[row, c] - row_mean
        partial += centred * centred
    row_rstd = ONE / math.sqrt(block_sum(partial, scratch) / float32(C) + LN_EPS)

    for c in range(tid, C, n_threads):
        out[row, c] = (inp[row, c] - row_mean) * row_rstd * weight[c] + bias[c]
    if tid == 0:
        mean[row] = row_mean
        rstd[row] = row_rstd


@cuda.jit
def _layernorm_backward_kernel(dinp, dweight, dbias, dout, inp, weight, mean, rstd,
                               rows_per_block):
    # dinp (N, C) +=, dweight (C,) +=, dbias (C,) +=, dout (N, C), inp (N, C), weight (C,),
    # mean (N,), rstd (N,); block = rows [blockIdx * rows_per_block, ...)
    scratch = cuda.shared.array(REDUCE_SCRATCH, float32)
    # dynamic shared memory (2C,): [0, C) dweight partials, [C, 2C) dbias partials; column
    # c belongs to thread c % blockDim for the whole kernel, so no barrier guards them
    partials = cuda.shared.array(0, float32)
    tid, n_threads = cuda.threadIdx.x, cuda.blockDim.x
    N, C = inp.shape
    for c in range(tid, C, n_threads):
        partials[c] = float32(0.0)
        partials[C + c] = float32(0.0)

    first_row = cuda.blockIdx.x * rows_per_block
    for row in range(first_row, min(first_row + rows_per_block, N)):
        row_mean, row_rstd = mean[row], rstd[row]
        sum_dxhat = float32(0.0)
        sum_dxhat_xhat = float32(0.0)
        for c in range(tid, C, n_threads):
            dy = dout[row, c]
            xhat = (inp[row, c] - row_mean) * row_rstd
            dxhat = dy * weight[c]
            sum_dxhat += dxhat
            sum_dxhat_xhat += dxhat * xhat
            partials[c] += dy * xhat
            partials[C + c] += dy
        mean_dxhat = block_sum(sum_dxhat, scratch) / float32(C)
        mean_dxhat_xhat = block_sum(sum_dxhat_xhat, scratch) / float32(C)
        for c in range(tid, C, n_threads):
            xhat = (inp[row, c] - row_mean) * row_rstd
            dxhat = dout[row, c] * weight[c]
            dinp[row, c] += row_rstd * (dxhat - mean_dxhat - xhat * mean_dxhat_xhat)

    for c in range(tid, C, n_threads):
        cuda.atomic.add(dweight, c, partials[c])
        cuda.atomic.add(dbias, c, partials[C + c])


PTX_SIGNATURES = [
    (_layernorm_forward_kernel, (float32[:, ::1], float32[::1], float32[::1],
                                 float32[:, ::1], float32[::1], float32[::1])),
    (_layernorm_backward_kernel, (float32[:, ::1], float32[::1], float32[::1],
                                  float32[:, ::1], float32[:, ::1], float32[::1],
                                  float32[::1], float32[::1], int64)),
]


# ----------------------------------------------------------------------------------
# launchers

def _check_rows(inp, weight, mean, rstd, **rows_like_inp):
    """The shapes both passes share; returns (N, C)."""
    if len(inp.shape) != 2:
        raise ValueError(f"inp: expected shape (N, C), got {tuple(inp.shape)}")
    N, C = inp.shape
    check_not_empty("C", C)
    check_array("inp", inp, (N, C))
    check_array("weight", weight, (C,))
    check_array("mean", mean, (N,))
    check_array("rstd", rstd, (N,))
    for name, arr in rows_like_inp.items():
        check_array(name, arr, (N, C))
    return N, C


def layernorm_forward(out, mean, rstd, inp, weight, bias, *, stream=0, block=None):
    """out (N, C) = layernorm(inp (N, C)) * weight (C,) + bias (C,), eps 1e-5; writes the
    row statistics mean (N,) and rstd (N,) for the backward."""
    N, C = _check_rows(inp, weight, mean, rstd, out=out)
    block = row_block(C, FORWARD_BLOCK) if block is None else block
    check_block_size(block, WARP)
    check_array("bias", bias, (C,))
    if N == 0:
        return
    _layernorm_forward_kernel[N, block, stream](out, mean, rstd, inp, weight, bias)


def layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, *, stream=0,
                       block=None, rows_per_block=ROWS_PER_BLOCK):
    """dinp (N, C), dweight (C,) and dbias (C,) += the gradients of the forward given dout
    (N, C); all three accumulate (dinp is the residual stream's gradient)."""
    N, C = _check_rows(inp, weight, mean, rstd, dinp=dinp, dout=dout)
    block = row_block(C, BACKWARD_BLOCK) if block is None else block
    check_block_size(block, WARP)
    check_array("dweight", dweight, (C,))
    check_array("dbias", dbias, (C,))
    if rows_per_block < 1:
        raise ValueError(f"rows_per_block must be at least 1, got {rows_per_block}")
    shared_bytes = 2 * C * np.dtype(np.float32).itemsize
    if _SCRATCH_BYTES + shared_bytes > MAX_SHARED_BYTES:
        raise ValueError(f"layernorm_backward: C = {C} needs {_SCRATCH_BYTES + shared_bytes} "
                         f"bytes of shared memory, more than {MAX_SHARED_BYTES}")
    if N == 0:
        return
    _layernorm_backward_kernel[ceil_div(N, rows_per_block), block, stream, shared_bytes](
        dinp, dweight, dbias, dout, inp, weight, mean, rstd, rows_per_block)
