"""Whole-array sums to one float on the device: the logged mean loss and the squared
global gradient norm, so that the host copies back a single float (or nothing at all).
And record_step, which writes a step's metrics into a log on the device, so that the host
reads them every log interval instead of every step; and bias_backward, the column sums
of a layer's output gradient that are its bias's gradient, and gelu_bias_backward, the
GELU's backward with the column sums of what it writes (the bias's gradient of the GEMM
before the GELU).

NumPy twins: ``numpy.sum``, ``microgpt.reference.global_norm`` squared,
``NumpyBackend.record_step``, ``microgpt.reference.bias_backward`` and, for
gelu_bias_backward, ``reference.gelu_backward`` then ``reference.bias_backward`` (as
``NumpyBackend.matmul_gelu_backward`` with a dbias).

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

The column sums (bias_backward) are one launch in two dimensions: a grid of (column
tiles, row parts), each block's ROWS warps on every ROWS-th row of its part, a lane on
LANE_BYTES of adjacent columns (16: groups of GROUP, two of bf16, one of float32; one
column a lane where the rows do not divide into groups), UNROLL rows' loads in flight a
lane: one element a lane, as before, kept too few bytes in flight (1.2-1.6 TB/s). The
warps' sums meet in shared memory in warp order, each part's in a scratch row of its own;
the block of a tile that ends last (an integer count a tile, which it resets) adds the
tile's parts column by column, in order, to the gradient: the order of the blocks decides
which block adds, never the order of the additions, so the ranks of a data-parallel step
get the same bits. (The parts' sums were a second launch, a thread per column.) The
LayerNorm backward sums its blocks' partial weight gradients with the same kernel, parts
only (column_parts). gelu_bias_backward is the same kernel on dout and inp, each value
dout * gelu'(inp) written to dinp and summed: the bias's gradient costs no pass of its
own over the 100 MB of andrea-120m's dfc (bias_backward's 30 us of each of 12 a step).
"""
import functools
import math

import numpy as np
from numba import boolean, cuda, float32, int32, types, uint16

from .cache import jit
from .common import (REDUCE_SCRATCH, SIMULATOR, WARP, block_sum, ceil_div, check_array,
                     check_block_size, kept_with)
from .device import GROUP, SMS
from .elementwise import gelu_derivative
from .precision import check_activation, group_loader, group_storer, group_width

BLOCK = 512
MAX_BLOCKS = 2 if SIMULATOR else 1024
# the column sums' blocks: ROWS warps, each lane on LANE_BYTES of adjacent columns (in
# groups of GROUP, where rows divide into groups; else one column) of every ROWS-th row,
# UNROLL rows of them in flight; COLUMN_BLOCKS blocks in all, about, so that all run at
# once (the H200 sweep, docs/kernels-step.md: a second wave, and more parts for the last
# block to add, cost more than the fuller SMs gained)
ROWS = 2 if SIMULATOR else 8
LANE_BYTES = 16
UNROLL = 4
SM_BLOCKS = 3           # blocks an SM holds at once (the launch bounds cap the registers)
# gelu_bias_backward's rows in flight: it holds two arrays' values a row (dout and inp),
# so half as many rows keep as many bytes in flight within the same registers
GELU_UNROLL = 2
COLUMN_BLOCKS = 2 if SIMULATOR else SM_BLOCKS * SMS


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


@functools.cache
def _block_sums(width, groups, ROWS, UNROLL, gelu):
    """block_sums(sums, x, pre, dx, first, stride, col0), the column sums of a block of
    ROWS warps (see _column_sums_kernel); gelu: of dx = x * gelu'(pre), which it writes
    (pre and dx of x's shape; unread otherwise)."""
    load, store = group_loader(width), group_storer(width)
    COLS, TILE = groups * width, groups * WARP * width
    VALUES = UNROLL * COLS
    PRE = VALUES if gelu else 1

    @cuda.jit(device=True, inline=True)
    def block_sums(sums, x, pre, dx, first, stride, col0):
        # sums[c] (TILE,) = the sum over x's rows first, first + stride, .. (a warp each
        # from first + warp on, UNROLL rows' loads in flight a lane, in order), in order of
        # the warps; x's columns col0 + c
        n_rows, n_cols = x.shape
        lane, warp = cuda.threadIdx.x % WARP, cuda.threadIdx.x // WARP
        acc = cuda.local.array(COLS, float32)
        v = cuda.local.array(VALUES, float32)
        p = cuda.local.array(PRE, float32)
        for e in range(COLS):
            acc[e] = float32(0.0)
        # UNROLL rows at a time, all their loads before their adds; a row past the last,
        # or a group past the last column, is neither read nor summed (one loop: the last
        # rows, a loop of their own, each waited on its load, which took the tile's last
        # block, adding up a few parts a warp, several latencies of L2)
        row = first + warp
        step = stride * ROWS
        while row < n_rows:
            for u in range(UNROLL):
                for g in range(groups):
                    col = col0 + (g * WARP + lane) * width
                    if row + u * step < n_rows and col < n_cols:
                        load(v, (u * groups + g) * width, x, (row + u * step, col))
                        if gelu:
                            load(p, (u * groups + g) * width, pre, (row + u * step, col))
            for u in range(UNROLL):
                for g in range(groups):
                    col = col0 + (g * WARP + lane) * width
                    if row + u * step < n_rows and col < n_cols:
                        at = (u * groups + g) * width
                        if gelu:
                            # the float32 product summed (as the LayerNorm backward sums
                            # its float32 dinp), a bf16 dx its rounding
                            for e in range(width):
                                v[at + e] *= gelu_derivative(p[at + e])
                            store(dx, (row + u * step, col), v, at)
                        for e in range(width):
                            acc[g * width + e] += v[at + e]
            row += UNROLL * step
        cuda.syncthreads()           # sums is free (a previous call's readers are done)
        for g in range(groups):
            for e in range(width):
                sums[warp, (g * WARP + lane) * width + e] = acc[g * width + e]
        cuda.syncthreads()
        for c in range(cuda.threadIdx.x, TILE, ROWS * WARP):
            total = sums[0, c]
            for w in range(1, ROWS):
                total += sums[w, c]
            sums[0, c] = total
        cuda.syncthreads()
    return block_sums


@functools.cache
def _column_sums_kernel(width, groups, ROWS, UNROLL, finish, gelu=False):
    """The column sums of x (N, M) in a grid of (column tiles, row parts) blocks of ROWS
    warps, a lane's `groups` groups of width (group g at column g * WARP * width + lane *
    width of the tile: each of a warp's loads reads WARP * width adjacent elements of a
    row), UNROLL rows of them in flight; finish: the last block of a tile to end adds the
    tile's parts into dbias; gelu: the sums of dx = x * gelu'(pre), written as it goes
    (the GELU backward and its bias's gradient in one pass)."""
    TILE = groups * WARP * width
    threads = ROWS * WARP
    block_sums = _block_sums(width, groups, ROWS, UNROLL, gelu)
    parts_sums = _block_sums(width, groups, ROWS, UNROLL, False)

    @jit(**({} if SIMULATOR else {"launch_bounds": (threads, SM_BLOCKS)}))
    def column_sums_kernel(dbias, parts, counters, x, pre, dx):
        # parts[p, c] = the sum of column c of x (N, M), float32 or bf16 (gelu: of dx =
        # x * gelu'(pre), written), over row part p (rows p * ROWS + warp, every P * ROWS
        # rows); block (c tile, p). finish: dbias (M,) += the sum of the tile's parts, in
        # order, by the tile's last block (counters (tiles,) int32, 0 between launches)
        sums = cuda.shared.array((ROWS, TILE), float32)
        last = cuda.shared.array(1, int32)
        tile, p = cuda.blockIdx.x, cuda.blockIdx.y
        col0 = tile * TILE
        n_cols = x.shape[1]
        block_sums(sums, x, pre, dx, p * ROWS, cuda.gridDim.y, col0)
        for c in range(cuda.threadIdx.x, TILE, threads):
            if col0 + c < n_cols:
                parts[p, col0 + c] = sums[0, c]
        if finish:
            # the parts out before the count (integer atomics: the order the blocks end in
            # decides which adds up the parts, never the order of the additions)
            cuda.threadfence()
            cuda.syncthreads()
            if cuda.threadIdx.x == 0:
                ended = cuda.atomic.add(counters, tile, 1)
                last[0] = int32(ended == cuda.gridDim.y - 1)
            cuda.syncthreads()
            if last[0]:
                cuda.threadfence()
                parts_sums(sums, parts, parts, parts, 0, 1, col0)
                for c in range(cuda.threadIdx.x, TILE, threads):
                    if col0 + c < n_cols:
                        dbias[col0 + c] += sums[0, c]
                if cuda.threadIdx.x == 0:
                    counters[tile] = 0
    return column_sums_kernel


PTX_SIGNATURES = [
    (_block_sums_kernel, (float32[::1], float32[::1], boolean)),
    (_record_step_kernel, (float32[:, ::1], float32[::1], float32[::1], float32[::1])),
] + [
    (_column_sums_kernel(width, groups, ROWS, unroll, finish, gelu),
     (float32[::1], float32[:, ::1], int32[::1], x, x, x))
    for finish, gelu, unroll in [(False, False, UNROLL), (True, False, UNROLL),
                                 (True, True, GELU_UNROLL)]
    for width, groups, x in [(GROUP, 1, float32[:, ::1]), (GROUP, 2, uint16[:, ::1]),
                             (1, 1, float32[:, ::1]), (1, 1, uint16[:, ::1])]
] + [   # the QKV bias's q part: a view of dqkv's first columns
    (_column_sums_kernel(GROUP, 2, ROWS, UNROLL, True),
     (float32[::1], float32[:, ::1], int32[::1]) + (types.Array(uint16, 2, "A"),) * 3)]


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


def _column_tiles(x, lane_bytes, *others):
    """(width, groups, tiles) of the column sums of x (N, M): lane_bytes of x a lane in
    groups of GROUP where its rows divide into them and it and the others (arrays of its
    shape that the launch also reads or writes) start on a group (precision.group_width),
    else one column."""
    arrays = (x, *others)
    # a view of a wider array's first columns (bias_backward's dout) is read in groups
    # only where its rows start on a group too
    pitched = any(arr.strides[0] % (GROUP * arr.dtype.itemsize) for arr in arrays)
    width = 1 if pitched else group_width(x.shape[1], *arrays)
    groups = max(1, lane_bytes // (GROUP * x.dtype.itemsize)) if width == GROUP else 1
    return width, groups, ceil_div(x.shape[1], groups * WARP * width)


def _column_sums(dbias, x, owner, parts, stream, lane_bytes=LANE_BYTES, rows=ROWS,
                 unroll=UNROLL, gelu=None):
    """One launch of the column sums of x (N, M) into `parts` parts (parts, M) -> those;
    and, given dbias (M,), their totals added into it. gelu (dx, pre): the sums of dx =
    x * gelu'(pre), which the launch writes. The scratch is kept with owner's memory."""
    M = x.shape[1]
    width, groups, tiles = _column_tiles(x, lane_bytes, *(gelu or ()))
    parts = kept_with(owner, ("column parts", parts, M),
                      lambda: cuda.device_array((parts, M), np.float32))
    counters = kept_with(owner, ("column counters", tiles),
                         lambda: cuda.to_device(np.zeros(tiles, np.int32)))
    kernel = _column_sums_kernel(width, groups, rows, unroll, dbias is not None,
                                 gelu is not None)
    dx, pre = gelu or (x, x)
    kernel[(tiles, parts.shape[0]), rows * WARP, stream](
        parts[0] if dbias is None else dbias, parts, counters, x, pre, dx)
    return parts


def column_parts(x, owner, parts, *, stream=0):
    """The column sums of x (N, M), float32 or bf16, in `parts` parts -> (parts, M)
    float32, row p the sum over row part p (every parts * ROWS-th row from p * ROWS on),
    in a fixed order. The scratch is kept with owner's memory (the gradient a caller adds
    the parts into)."""
    if parts < 1:
        raise ValueError(f"parts must be at least 1, got {parts}")
    return _column_sums(None, x, owner, parts, stream)


def column_sum_parts(x, max_blocks=COLUMN_BLOCKS, lane_bytes=LANE_BYTES, rows=ROWS,
                     unroll=UNROLL, others=()):
    """The row parts of bias_backward's grid for x (N, M) (and the others its launch
    reads or writes, as _column_tiles): as many as max_blocks blocks allow over the
    column tiles, each warp with `unroll` rows or more."""
    tiles = _column_tiles(x, lane_bytes, *others)[2]
    return max(1, min(ceil_div(x.shape[0], rows * unroll), max_blocks // tiles))


def bias_backward(dbias, dout, *, stream=0, max_blocks=COLUMN_BLOCKS):
    """dbias (M,) += the column sums of dout (N, M), float32 or bf16, accumulated in
    float32: the gradient of a bias added to every row of a layer's output. dout may be a
    view of some of a wider array's columns (the QKV bias's q part, model.py). The rows are
    summed in parts (column_sum_parts), and the parts by the last block of each column
    tile: one launch."""
    if len(dout.shape) != 2:
        raise ValueError(f"dout: expected shape (N, M), got {tuple(dout.shape)}")
    N, M = dout.shape
    check_activation("dout", dout, (N, M), strided=True)
    check_array("dbias", dbias, (M,))
    if N == 0 or M == 0:
        return
    if max_blocks < 1:
        raise ValueError(f"max_blocks must be at least 1, got {max_blocks}")
    _column_sums(dbias, dout, dbias, column_sum_parts(dout, max_blocks), stream)


def gelu_bias_backward(dinp, dbias, dout, inp, *, stream=0, max_blocks=COLUMN_BLOCKS):
    """dinp (N, M) = dout * gelu'(inp) (elementwise.gelu_backward's), and dbias (M,) += its
    column sums (the float32 products, before a bf16 dinp's rounding), in one pass: the
    GELU's backward and the gradient of the bias of the GEMM before the GELU (GPT-2's MLP
    up projection), where the two were a pass each over dinp. Each array float32 or bf16;
    dinp may be dout (in place: a lane reads its elements before it writes them)."""
    if len(dout.shape) != 2:
        raise ValueError(f"dout: expected shape (N, M), got {tuple(dout.shape)}")
    N, M = dout.shape
    check_activation("dinp", dinp, (N, M))
    check_activation("dout", dout, (N, M))
    check_activation("inp", inp, (N, M))
    check_array("dbias", dbias, (M,))
    if N == 0 or M == 0:
        return
    if max_blocks < 1:
        raise ValueError(f"max_blocks must be at least 1, got {max_blocks}")
    parts = column_sum_parts(dout, max_blocks, unroll=GELU_UNROLL, others=(dinp, inp))
    _column_sums(dbias, dout, dbias, parts, stream, unroll=GELU_UNROLL, gelu=(dinp, inp))
