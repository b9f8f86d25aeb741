"""Whole-array sums to one float on the device: the logged mean loss and the squared
global gradient norm, so that the host copies back a single float (or nothing at all).
And record_step, which writes a step's metrics into a log on the device, so that the host
reads them every log interval instead of every step; and bias_backward, the column sums
of a layer's output gradient that are its bias's gradient.

NumPy twins: ``numpy.sum``, ``microgpt.reference.global_norm`` squared,
``NumpyBackend.record_step`` and ``microgpt.reference.bias_backward``.

Two launches: a grid of at most MAX_BLOCKS blocks strides over the array, each thread
accumulating its float32 partial sum, each block reducing its threads' partials
(kernels.common.block_sum) and writing the block's total to a scratch slot of its own;
then the same kernel, one block of it, sums the slots. Every step of it has a fixed order,
so the same array gives the same bits every time: the gradient norm scales every rank's
update of a data-parallel
step, and with the blocks' totals added by atomics (in the order they finished) the ranks'
norms, and so their parameters, drifted apart by a rounding now and then. The scratch is
kept with the output's allocation (common.kept_with), which a captured step's launches
hold. MAX_BLOCKS blocks keep every SM of an H200 streaming. The simulator, which pays ~1 ms
per simulated thread, takes two (a 15,000-parameter model's gradient norm was 30 blocks,
20 s): the stride a GPU takes over andrea-120m's gradient.

The column sums are the same two passes in two dimensions: a grid of (column tiles, row
parts), each block's COLUMNS threads of a warp reading COLUMNS adjacent columns of a row
(one coalesced read) and its LANES warps every LANES-th row of the part; the lanes' sums
meet in shared memory in lane order, each part's in a scratch row of its own, and a
second launch adds the parts column by column, in order, to the gradient. A fixed order
again: the ranks of a data-parallel step must get the same bits. The LayerNorm backward
sums its blocks' partial weight gradients with the same first pass (column_parts).
"""
import math

import numpy as np
from numba import boolean, cuda, float32, int32, uint16

from .cache import jit
from .common import (REDUCE_SCRATCH, SIMULATOR, WARP, block_sum, ceil_div, check_array,
                     check_block_size, kept_with)
from .precision import check_activation, load_float32

BLOCK = 512
MAX_BLOCKS = 2 if SIMULATOR else 1024
COLUMNS = WARP              # a column tile: one warp's coalesced read of a row
LANES = 2 if SIMULATOR else 8   # warps of a column block, each on every LANES-th row


# ----------------------------------------------------------------------------------
# kernels

@jit
def _block_sums_kernel(totals, x, square):
    # totals[b] = block b's share of the sum of x (n,), or of its squares
    scratch = cuda.shared.array(REDUCE_SCRATCH, float32)
    partial = float32(0.0)
    for i in range(cuda.grid(1), x.size, cuda.gridsize(1)):
        value = x[i]
        partial += value * value if square else value
    block_total = block_sum(partial, scratch)
    if cuda.threadIdx.x == 0:
        totals[cuda.blockIdx.x] = block_total


@jit
def _record_step_kernel(log, losses, norm_squared, hparams):
    # one block: row (step - 1) % rows of log (rows, 3) = the mean of losses (n,), the
    # gradient norm sqrt(norm_squared[0]) and the learning rate hparams[1]
    scratch = cuda.shared.array(REDUCE_SCRATCH, float32)
    partial = float32(0.0)
    for i in range(cuda.threadIdx.x, losses.size, cuda.blockDim.x):
        partial += losses[i]
    total = block_sum(partial, scratch)
    if cuda.threadIdx.x == 0:
        row = (int32(hparams[0]) - 1) % log.shape[0]
        log[row, 0] = total / float32(losses.size)
        log[row, 1] = math.sqrt(norm_squared[0])
        log[row, 2] = hparams[1]


@jit
def _column_parts_kernel(parts, dout):
    # parts[p, c] = the sum of column c of dout (N, M), float32 or bf16, over row part p
    # (rows p * LANES + lane, every n_parts * LANES rows); block (c tile, p), COLUMNS x LANES
    sums = cuda.shared.array((LANES, COLUMNS), float32)
    n_rows, n_cols = dout.shape
    t, lane = cuda.threadIdx.x % COLUMNS, cuda.threadIdx.x // COLUMNS
    col = cuda.blockIdx.x * COLUMNS + t
    partial = float32(0.0)
    if col < n_cols:
        for row in range(cuda.blockIdx.y * LANES + lane, n_rows, cuda.gridDim.y * LANES):
            partial += load_float32(dout, (row, col))
    sums[lane, t] = partial
    cuda.syncthreads()
    if lane == 0 and col < n_cols:
        total = sums[0, t]
        for other in range(1, LANES):
            total += sums[other, t]
        parts[cuda.blockIdx.y, col] = total


@jit
def _column_totals_kernel(dbias, parts):
    # dbias (M,) += the sum of parts (n_parts, M) down each column, in order
    col = cuda.grid(1)
    if col < dbias.size:
        total = float32(0.0)
        for p in range(parts.shape[0]):
            total += parts[p, col]
        dbias[col] += total


PTX_SIGNATURES = [
    (_block_sums_kernel, (float32[::1], float32[::1], boolean)),
    (_record_step_kernel, (float32[:, ::1], float32[::1], float32[::1], float32[::1])),
    (_column_parts_kernel, (float32[:, ::1], float32[:, ::1])),
    (_column_parts_kernel, (float32[:, ::1], uint16[:, ::1])),
    (_column_totals_kernel, (float32[::1], float32[:, ::1])),
]


# ----------------------------------------------------------------------------------
# launchers

def _launch_sum(out, x, square, stream, block, max_blocks):
    check_block_size(block, WARP)
    if len(x.shape) != 1:
        raise ValueError(f"x: expected a flat (n,) array, got shape {tuple(x.shape)}")
    check_array("x", x, x.shape)
    check_array("out", out, (1,))
    if max_blocks < 1:
        raise ValueError(f"max_blocks must be at least 1, got {max_blocks}")
    grid = max(1, min(ceil_div(x.size, block), max_blocks))
    totals = kept_with(out, ("block totals", grid), lambda: cuda.device_array(grid, np.float32))
    _block_sums_kernel[grid, block, stream](totals, x, square)
    _block_sums_kernel[1, block, stream](out, totals, False)     # one block: the total


def sum_to(out, x, *, stream=0, block=BLOCK, max_blocks=MAX_BLOCKS):
    """out (1,) = sum of x (n,), accumulated in float32 on the device."""
    _launch_sum(out, x, False, stream, block, max_blocks)


def sum_squares_to(out, x, *, stream=0, block=BLOCK, max_blocks=MAX_BLOCKS):
    """out (1,) = sum of the squares of x (n,), accumulated in float32 on the device."""
    _launch_sum(out, x, True, stream, block, max_blocks)


def record_step(log, losses, norm_squared, hparams, *, stream=0, block=BLOCK):
    """Row (step - 1) % rows of log (rows, 3) = [mean of losses (n,), sqrt(norm_squared[0]),
    hparams[1]], step being hparams[0]: the loss, gradient norm and learning rate of the
    step that hparams describes (microgpt.ops.HPARAMS, LOG_COLUMNS)."""
    check_block_size(block, WARP)
    if len(log.shape) != 2 or log.shape[1] != 3 or log.shape[0] < 1:
        raise ValueError(f"log: expected shape (rows, 3), got {tuple(log.shape)}")
    check_array("log", log, log.shape)
    if len(losses.shape) != 1:
        raise ValueError(f"losses: expected a flat (n,) array, got shape {tuple(losses.shape)}")
    if losses.size == 0:
        raise ValueError("losses: a step has at least one token, got none")
    check_array("losses", losses, losses.shape)
    check_array("norm_squared", norm_squared, (1,))
    check_array("hparams", hparams, (4,))
    _record_step_kernel[1, block, stream](log, losses, norm_squared, hparams)


def column_parts(x, owner, *, stream=0, max_blocks=MAX_BLOCKS):
    """The column sums of x (N, M), float32 or bf16, in parts -> parts (P, M) float32, row
    p the sum over row part p (every P * LANES-th row from p * LANES on), in a fixed
    order; as many parts as max_blocks blocks allow over the column tiles. The scratch is
    kept with owner's memory (the gradient a caller adds the parts into)."""
    N, M = x.shape
    if max_blocks < 1:
        raise ValueError(f"max_blocks must be at least 1, got {max_blocks}")
    tiles = ceil_div(M, COLUMNS)
    n_parts = max(1, min(ceil_div(N, LANES), max_blocks // tiles))
    parts = kept_with(owner, ("column parts", n_parts, M),
                      lambda: cuda.device_array((n_parts, M), np.float32))
    _column_parts_kernel[(tiles, n_parts), COLUMNS * LANES, stream](parts, x)
    return parts


def bias_backward(dbias, dout, *, stream=0, max_blocks=MAX_BLOCKS):
    """dbias (M,) += the column sums of dout (N, M), float32 or bf16, accumulated in
    float32: the gradient of a bias added to every row of a layer's output. The rows are
    summed in parts, as many as max_blocks blocks allow over the column tiles."""
    if len(dout.shape) != 2:
        raise ValueError(f"dout: expected shape (N, M), got {tuple(dout.shape)}")
    N, M = dout.shape
    check_activation("dout", dout, (N, M))
    check_array("dbias", dbias, (M,))
    if N == 0 or M == 0:
        return
    parts = column_parts(dout, dbias, stream=stream, max_blocks=max_blocks)
    _column_totals_kernel[ceil_div(M, BLOCK), BLOCK, stream](dbias, parts)
