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
Few rows (FEW_ROWS: a decoding step's, one latency chain) take the residual forward's
kernel below without its add, every load of the row in flight at once.

Residual + LayerNorm forward and the backward, the step's 24 calls each: C is a
compile-time constant of the kernel (one per model width), and a lane holds its columns of
the row in registers, C / 32 of them, in groups of 4 (``precision.group_loader``: one
16-byte access of float32, 8 of bf16) where the row divides into groups. Every read of a
row is issued before its first write and its first use, so a lane has all its row's loads
in flight at once (one load at a time per lane, and a store between two loads, kept too
few bytes in flight to stream memory: docs/fused-kernels.md's tuning log).

Residual + LayerNorm forward: the same as the forward, on the sum a + b of two rows (the
residual stream and a block's branch), which it writes out as the next residual stream;
the sum stays in registers for the statistics and the normalisation, so a and b are read
once and no second launch re-reads the sum. The backward of the residual add is the
identity into both of its inputs, so this op's backward is ``layernorm_backward``
accumulating into the residual stream's gradient, as the model's is.

Backward, fused into one launch: a block owns a chunk of rows_per_block rows, its warps a
row each at a time. Per row a warp reads x, dout and the dinp it adds to, reduces
sum(dxhat) and sum(dxhat * xhat), and writes dinp; a lane's columns are the same in every
row, so it accumulates dweight and dbias for them in registers across its rows, and at
the end the block sums its warps' (in shared memory, one warp after the other) into its
own row of a scratch of partial sums, which two more launches add up in a fixed order:
``reductions.column_parts`` sums the blocks' rows in SUM_PARTS parts, a warp of columns
and LANES rows at a time, and a thread per column adds the parts into dweight and dbias.
(One thread per column walking all the blocks' rows, the version before, was a chain of
256 dependent loads at N = 16384: ~85 us per call, 13-25 calls a step, -12% of andrea-12m's
step.) No atomics: every run gives the same bits
(the float atomics that did this took the blocks as they finished, so two runs of the
same step differed by a rounding, and every later step with them).
(Each warp's partials in shared memory, the version before, read and wrote them between
the row's loads, which held the next load back.) With biases (GPT-2's), dinp's new value is
the gradient of an output projection's output (the residual stream's), whose bias's
gradient is its column sums: a third set of the same partial sums (dinp_sum), from the
registers that hold dinp as it is written, where a column-sum pass of its own
(reductions.bias_backward) reread dinp, 24 times a step.

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

from .atoms import store_float32
from .cache import jit
from .common import (REDUCE_SCRATCH, SIMULATOR, WARP, ceil_div, check_array,
                     check_block_size, check_not_empty, kept_with, row_block, warp_sum)
from .device import MAX_THREADS, SHARED_LIMIT
from .precision import GROUP, check_activation, group_loader, group_storer, group_width
from .reductions import column_parts
from microgpt.reference import LN_EPS as _LN_EPS

LN_EPS = np.float32(_LN_EPS)
ZERO = np.float32(0.0)
ONE = np.float32(1.0)

FORWARD_BLOCK = 256        # 8 rows at a time
# the backward's default launch, the fastest of an H200 sweep at andrea-120m (tuning log,
# docs/fused-kernels.md): 4 warps of 16 rows each, so that N = 16384 rows make 256
# blocks, one wave of the 396 the SMs hold (3 each: the registers); a block's end, its
# sums, then comes once per 64 rows (16 rows a block took 2.1x as long)
BACKWARD_BLOCK = 128
ROWS_PER_BLOCK = 64
COLUMN_SUMS_BLOCK = 128
# the parts the blocks' partial sums are first summed in (a block each per 32 columns):
# 4 at N = 16384 leave each lane of column_parts 8 rows; the simulator, which pays per
# thread, takes one
SUM_PARTS = 1 if SIMULATOR else 4
# the kernels that hold a row in registers (C / 32 floats a lane, up to 255 registers a
# thread) fit at most this many threads in the SM's 64K registers
MAX_REGISTER_ROW_BLOCK = 256
FEW_ROWS = 16              # a decoding step's (kernels/gemm/skinny.py's ROWS): weight and
                           # bias loaded with the row
FLOAT32_BYTES = 4
# the shared memory a block may use without the driver's opt-in (48 KiB), less the block
# reduction's scratch (WARP floats on a GPU)
MAX_SHARED_BYTES = SHARED_LIMIT - WARP * FLOAT32_BYTES


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


@jit
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


@functools.cache
def _lane_columns(C, width):
    """(groups, columns) a lane holds of a row of C in registers, in groups of width:
    group k of a lane starts at column (lane + k * WARP) * width."""
    groups = ceil_div(C, width * WARP)
    return groups, groups * width


@functools.cache
def _residual_layernorm_forward_kernel(C, width, few=False, residual=True):
    """The fused forward for rows of C, read and written in groups of width; few (a
    decoding step's rows): weight and bias are loaded with the row, their latency hidden
    behind its loads, at the cost of 2 C / 32 more registers a lane (a launch of few rows
    is one latency chain, and the training step's many rows want the registers);
    residual False: the plain forward of a (b and resid unused), for few rows."""
    GROUPS, COLS = _lane_columns(C, width)
    load, store = group_loader(width), group_storer(width)
    AFFINE = COLS if few else 1

    @jit
    def residual_layernorm_forward_kernel(resid, out, mean, rstd, a, b, weight, bias):
        # resid (N, C) = a + b, out (N, C) float32 or bf16 = layernorm(resid) * weight +
        # bias, mean (N,), rstd (N,), a (N, C), b (N, C), weight (C,), bias (C,); warp =
        # row, its lanes' columns in registers
        scratch = cuda.shared.array(REDUCE_SCRATCH, float32)
        row, lane = _warp_row()
        N = a.shape[0]
        x = cuda.local.array(COLS, float32)
        y = cuda.local.array(COLS, float32)
        w = cuda.local.array(AFFINE, float32)
        z = cuda.local.array(AFFINE, float32)
        # every read of the row before the first write, so that a lane has all its
        # groups' loads in flight at once
        for k in range(GROUPS):
            col = (lane + k * WARP) * width
            if row < N and col < C:
                load(x, k * width, a, (row, col))
                if residual:
                    load(y, k * width, b, (row, col))
                if few:
                    load(w, k * width, weight, col)
                    load(z, k * width, bias, col)
            else:
                for e in range(width):
                    x[k * width + e] = ZERO
                    y[k * width + e] = ZERO
        partial = float32(0.0)
        for i in range(COLS):
            if residual:
                x[i] += y[i]
            partial += x[i]
        for k in range(GROUPS):
            col = (lane + k * WARP) * width
            if residual and row < N and col < C:
                store(resid, (row, col), x, k * width)
        row_mean = warp_sum(partial, scratch) / float32(C)
        # the variance of the centred row (a column past C is not in it)
        partial = float32(0.0)
        for k in range(GROUPS):
            for e in range(width):
                if (lane + k * WARP) * width + e < C:
                    x[k * width + e] -= row_mean
                    partial += x[k * width + e] * x[k * width + e]
        row_rstd = ONE / math.sqrt(warp_sum(partial, scratch) / float32(C) + LN_EPS)
        if row < N:
            for k in range(GROUPS):
                col = (lane + k * WARP) * width
                if col < C:
                    if few:
                        for e in range(width):
                            x[k * width + e] = (x[k * width + e] * row_rstd * w[k * width + e]
                                                + z[k * width + e])
                    else:
                        load(y, k * width, weight, col)
                        for e in range(width):
                            x[k * width + e] *= row_rstd * y[k * width + e]
                        load(y, k * width, bias, col)
                        for e in range(width):
                            x[k * width + e] += y[k * width + e]
                    store(out, (row, col), x, k * width)
            if lane == 0:
                mean[row] = row_mean
                rstd[row] = row_rstd

    return residual_layernorm_forward_kernel


@functools.cache
def _layernorm_backward_kernel(C, width, write_copy, sum_dinp=False, write_out=False):
    """The backward for rows of C, read and written in groups of width; write_copy: also
    write dinp's new value, rounded to bf16, into dinp_copy; sum_dinp: a third set of
    partial sums, the column sums of dinp's new value (a bias's gradient, see
    layernorm_backward); write_out: the forward's output recomputed into out, xhat *
    weight + bias (xhat is in registers; bias is read a group at a time as it is
    written, a group's registers where the row's would spill)."""
    GROUPS, COLS = _lane_columns(C, width)
    load, store = group_loader(width), group_storer(width)
    SETS = 3 if sum_dinp else 2
    SUMS = SETS * C
    DS = COLS if sum_dinp else 1

    @jit
    def layernorm_backward_kernel(dinp, dinp_copy, out, partials, dout, inp, weight, bias,
                                  mean, rstd, rows_per_block):
        # dinp (N, C) +=, dinp_copy (N, C) bf16 (when write_copy), out (N, C) float32 or
        # bf16 and bias (C,) (when write_out), partials (blocks, SETS
        # C) = each block's dweight [0, C), dbias [C, 2C) and (sum_dinp) column sums of
        # the new dinp [2C, 3C), dout (N, C) float32 or bf16, inp (N, C), weight (C,),
        # mean (N,), rstd (N,); block = rows [blockIdx * rows_per_block, ...), a warp per
        # row at a time, its lanes' columns in registers
        scratch = cuda.shared.array(REDUCE_SCRATCH, float32)
        # the block's sets of sums, summed from its warps' registers
        sums = cuda.shared.array(SUMS, float32)
        tid, n_threads = cuda.threadIdx.x, cuda.blockDim.x
        warp, lane, n_warps = tid // WARP, tid % WARP, n_threads // WARP
        N = inp.shape[0]
        x = cuda.local.array(COLS, float32)
        dy = cuda.local.array(COLS, float32)
        old = cuda.local.array(COLS, float32)
        w = cuda.local.array(COLS, float32)
        # this lane's dweight and dbias over the block's rows: its columns are the same
        # in every row
        dw = cuda.local.array(COLS, float32)
        db = cuda.local.array(COLS, float32)
        # and of the new dinp: dinp is in registers when it is written, so its column
        # sums cost no second pass over it (bias_backward's, 14 us a call at andrea-120m)
        ds = cuda.local.array(DS, float32)
        b = cuda.local.array(width, float32)
        for i in range(COLS):
            dw[i] = ZERO
            db[i] = ZERO
        for i in range(DS):
            ds[i] = ZERO
        for c in range(tid, SUMS, n_threads):
            sums[c] = ZERO

        first_row = cuda.blockIdx.x * rows_per_block
        last_row = min(first_row + rows_per_block, N)
        for warp_rows in range(first_row, last_row, n_warps):
            row = warp_rows + warp
            # every read of the row (and of dinp, which it adds to) before the first
            # write; a tail warp's zeros add nothing to the sums
            for k in range(GROUPS):
                col = (lane + k * WARP) * width
                if row < last_row and col < C:
                    load(x, k * width, inp, (row, col))
                    load(dy, k * width, dout, (row, col))
                    load(old, k * width, dinp, (row, col))
                    load(w, k * width, weight, col)
                else:
                    for e in range(width):
                        x[k * width + e] = ZERO
                        dy[k * width + e] = ZERO
                        w[k * width + e] = ZERO
            row_mean, row_rstd = mean[min(row, N - 1)], rstd[min(row, N - 1)]
            sum_dxhat = float32(0.0)
            sum_dxhat_xhat = float32(0.0)
            for i in range(COLS):
                xhat = (x[i] - row_mean) * row_rstd
                dxhat = dy[i] * w[i]
                sum_dxhat += dxhat
                sum_dxhat_xhat += dxhat * xhat
                dw[i] += dy[i] * xhat
                db[i] += dy[i]
                x[i] = xhat
                dy[i] = dxhat
            mean_dxhat = warp_sum(sum_dxhat, scratch) / float32(C)
            mean_dxhat_xhat = warp_sum(sum_dxhat_xhat, scratch) / float32(C)
            for k in range(GROUPS):
                col = (lane + k * WARP) * width
                if row < last_row and col < C:
                    for e in range(width):
                        i = k * width + e
                        old[i] += row_rstd * (dy[i] - mean_dxhat - x[i] * mean_dxhat_xhat)
                        if sum_dinp:
                            ds[i] += old[i]
                    store(dinp, (row, col), old, k * width)
                    if write_copy:
                        store(dinp_copy, (row, col), old, k * width)
                    if write_out:
                        load(b, 0, bias, col)
                        for e in range(width):
                            i = k * width + e
                            x[i] = x[i] * w[i] + b[e]
                        store(out, (row, col), x, k * width)

        # the warps' sums into the block's, one warp after the other (a fixed order, where
        # shared atomics took the warps as they came), then the block's into its row of
        # partials, which _column_sums_kernel adds up in block order
        cuda.syncthreads()
        for turn in range(n_warps):
            if warp == turn:
                for k in range(GROUPS):
                    for e in range(width):
                        col = (lane + k * WARP) * width + e
                        if col < C:
                            sums[col] += dw[k * width + e]
                            sums[C + col] += db[k * width + e]
                            if sum_dinp:
                                sums[2 * C + col] += ds[k * width + e]
            cuda.syncthreads()
        for c in range(tid, SUMS, n_threads):
            partials[cuda.blockIdx.x, c] = sums[c]
    return layernorm_backward_kernel


@jit
def _column_sums_kernel(dweight, dbias, dinp_sum, partials):
    # dweight (C,) += the column sums of partials (parts, 2C or 3C) [:, :C], dbias (C,)
    # += those of [:, C:2C], dinp_sum (C,) += those of [:, 2C:] where partials has them
    # (else it is unread); a thread per column, adding the parts in order: the same bits
    # every run
    c = cuda.grid(1)
    C = dweight.shape[0]
    if c < partials.shape[1]:
        total = float32(0.0)
        for b in range(partials.shape[0]):
            total += partials[b, c]
        if c < C:
            dweight[c] += total
        elif c < 2 * C:
            dbias[c - C] += total
        else:
            dinp_sum[c - 2 * C] += total


_ROWS, _VECTOR, _BF16_ROWS = float32[:, ::1], float32[::1], uint16[:, ::1]
PTX_SIGNATURES = [
    (_layernorm_forward_kernel, (_ROWS, _VECTOR, _VECTOR, _ROWS, _VECTOR, _VECTOR)),
    (_layernorm_forward_kernel, (_BF16_ROWS, _VECTOR, _VECTOR, _ROWS, _VECTOR, _VECTOR)),
] + [
    # the models' widths (andrea-120m's and andrea-12m's) in groups, and a width that
    # does not divide into groups
    signature for C, width in [(768, GROUP), (384, GROUP), (386, 1)] for signature in [
        (_residual_layernorm_forward_kernel(C, width),
         (_ROWS, _ROWS, _VECTOR, _VECTOR, _ROWS, _ROWS, _VECTOR, _VECTOR)),
        (_residual_layernorm_forward_kernel(C, width),
         (_ROWS, _BF16_ROWS, _VECTOR, _VECTOR, _ROWS, _ROWS, _VECTOR, _VECTOR)),
        (_residual_layernorm_forward_kernel(C, width, True),     # a decoding step's rows
         (_ROWS, _BF16_ROWS, _VECTOR, _VECTOR, _ROWS, _ROWS, _VECTOR, _VECTOR)),
        (_residual_layernorm_forward_kernel(C, width, True, False),     # and its first
         (_ROWS, _BF16_ROWS, _VECTOR, _VECTOR, _ROWS, _ROWS, _VECTOR, _VECTOR)),
        (_layernorm_backward_kernel(C, width, False),
         (_ROWS, _ROWS, _ROWS, _ROWS, _ROWS, _ROWS, _VECTOR, _VECTOR, _VECTOR, _VECTOR,
          int64)),
        (_layernorm_backward_kernel(C, width, False, write_out=True),     # fp32's step
         (_ROWS, _ROWS, _ROWS, _ROWS, _ROWS, _ROWS, _VECTOR, _VECTOR, _VECTOR, _VECTOR,
          int64)),
        (_layernorm_backward_kernel(C, width, True),
         (_ROWS, _BF16_ROWS, _ROWS, _ROWS, _BF16_ROWS, _ROWS, _VECTOR, _VECTOR, _VECTOR,
          _VECTOR, int64)),
        (_layernorm_backward_kernel(C, width, True, write_out=True),      # bf16's step
         (_ROWS, _BF16_ROWS, _BF16_ROWS, _ROWS, _BF16_ROWS, _ROWS, _VECTOR, _VECTOR,
          _VECTOR, _VECTOR, int64)),
        (_layernorm_backward_kernel(C, width, True, True, True),      # GPT-2's biases
         (_ROWS, _BF16_ROWS, _BF16_ROWS, _ROWS, _BF16_ROWS, _ROWS, _VECTOR, _VECTOR,
          _VECTOR, _VECTOR, int64))]
] + [(_column_sums_kernel, (_VECTOR, _VECTOR, _VECTOR, _ROWS))]


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


def _block(block, rows, cap, most=MAX_THREADS):
    """The launch's block: as given (whole warps, at most `most` threads), or by default a
    warp per row, up to cap threads and no more warps than rows."""
    block = row_block(rows * WARP, cap) if block is None else block
    check_block_size(block, WARP)
    if block > most:
        raise ValueError(f"block size must be at most {most} for a kernel that holds its "
                         f"rows in registers, got {block}")
    return block


def _check_shared_bytes(op, C, floats_per_column):
    """The shared memory a launch of op needs for rows of C, checked."""
    shared_bytes = floats_per_column * C * FLOAT32_BYTES
    if shared_bytes > MAX_SHARED_BYTES:
        raise ValueError(f"{op}: C = {C} needs {shared_bytes} bytes of shared memory, more "
                         f"than the {MAX_SHARED_BYTES} a block has beside its reduction "
                         "scratch")


def layernorm_forward(out, mean, rstd, inp, weight, bias, *, stream=0, block=None):
    """out (N, C) = layernorm(inp (N, C)) * weight (C,) + bias (C,), eps 1e-5; writes the
    row statistics mean (N,) and rstd (N,) for the backward. out is float32 or bf16."""
    N, C = _check_rows(inp, weight, mean, rstd)
    check_activation("out", out, (N, C))
    block = _block(block, N, FORWARD_BLOCK)
    check_array("bias", bias, (C,))
    if N == 0:
        return
    if N <= FEW_ROWS and block <= MAX_REGISTER_ROW_BLOCK:
        # a decoding step's first LayerNorm: the residual forward's few-rows kernel, its
        # row in registers, where this one's three passes of dependent loads took 7.4 us
        # for one row of 768 on the H200 (the residual forward 1.9)
        width = group_width(C, out, inp, weight, bias)
        _residual_layernorm_forward_kernel(C, width, True, False)[
            ceil_div(N, block // WARP), block, stream](inp, out, mean, rstd, inp, inp, weight,
                                                       bias)
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
    block = _block(block, N, FORWARD_BLOCK, MAX_REGISTER_ROW_BLOCK)
    if N == 0:
        return
    width = group_width(C, resid, out, a, b, weight, bias)
    kernel = _residual_layernorm_forward_kernel(C, width, N <= FEW_ROWS)
    kernel[ceil_div(N, block // WARP), block, stream](resid, out, mean, rstd, a, b, weight,
                                                      bias)


def layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, *, dinp_copy=None,
                       dinp_sum=None, out=None, bias=None, stream=0, block=None,
                       rows_per_block=ROWS_PER_BLOCK):
    """dinp (N, C), dweight (C,) and dbias (C,) += the gradients of the forward given dout
    (N, C); all three accumulate (dinp is the residual stream's gradient). dout is float32
    or bf16; dinp_copy (N, C), when given, is bf16 and receives dinp's new value rounded;
    dinp_sum (C,), when given, += the column sums of dinp's new value: the gradient of the
    bias of the layer whose output dinp is the gradient of (GPT-2's attention and MLP
    output projections write the residual stream), summed as dinp is written. out (N, C),
    float32 or bf16, with bias (C,): = the forward's output, xhat * weight + bias from
    the saved mean and rstd (the operand of the dW GEMM of the layer after the norm, which
    the forward did not keep): a write, as the row is in registers."""
    N, C = _check_rows(inp, weight, mean, rstd)
    check_array("dinp", dinp, (N, C))
    check_activation("dout", dout, (N, C))
    if dinp_copy is not None:
        check_array("dinp_copy", dinp_copy, (N, C), np.uint16)
    check_array("dweight", dweight, (C,))
    check_array("dbias", dbias, (C,))
    if dinp_sum is not None:
        check_array("dinp_sum", dinp_sum, (C,))
    if (out is None) != (bias is None):
        raise ValueError("out and bias: give both (the forward's output and its bias) or "
                         "neither")
    if out is not None:
        check_activation("out", out, (N, C))
        check_array("bias", bias, (C,))
    if rows_per_block < 1:
        raise ValueError(f"rows_per_block must be at least 1, got {rows_per_block}")
    sets = 2 if dinp_sum is None else 3
    _check_shared_bytes("layernorm_backward", C, sets)
    block = _block(block, min(N, rows_per_block), BACKWARD_BLOCK, MAX_REGISTER_ROW_BLOCK)
    if N == 0:
        return
    copy = dinp if dinp_copy is None else dinp_copy
    out, bias = (dinp, weight) if out is None else (out, bias)
    width = group_width(C, dinp, copy, out, dout, inp, weight, bias)
    kernel = _layernorm_backward_kernel(C, width, dinp_copy is not None, dinp_sum is not None,
                                        out is not dinp)
    blocks = ceil_div(N, rows_per_block)
    # kept with dweight's memory (the model's gradient buffer, which every LayerNorm's
    # dweight views): the launches of a step run in stream order, so they share it
    partials = kept_with(dweight, ("layernorm partials", blocks, sets, C),
                         lambda: cuda.device_array((blocks, sets * C), np.float32))
    kernel[blocks, block, stream](dinp, copy, out, partials, dout, inp, weight, bias, mean,
                                  rstd, rows_per_block)
    parts = column_parts(partials, dweight, SUM_PARTS, stream=stream)
    _column_sums_kernel[ceil_div(sets * C, COLUMN_SUMS_BLOCK), COLUMN_SUMS_BLOCK, stream](
        dweight, dbias, dbias if dinp_sum is None else dinp_sum, parts)
