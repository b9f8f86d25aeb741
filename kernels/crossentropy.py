"""Softmax cross-entropy over the vocabulary, forward and backward, one block per row,
and both passes fused into one launch for the training step.

NumPy twins: ``microgpt.reference.crossentropy_forward``, ``crossentropy_backward`` and
``crossentropy_forward_backward``.

Forward: the row's groups of columns (4 in one vector access where V divides into them,
else single columns: ``precision.group_loader``) are dealt to the block's threads in turn,
coalesced across the block; a thread reads UNROLL of its groups at once (a chunk) and
keeps an online pair (running max, sum of exp(x - max) over its other columns), rescaled
once per chunk; the block combines the pairs (a block max, then a block sum of the
rescaled sums). It writes the row's logsumexp and loss = (max - logits[target]) +
log1p(sum): the max's own term of 1 is kept out of the sum so that the loss of a
confidently right token (1 + tiny) keeps its relative accuracy. No probabilities tensor
is written.

Backward: dlogits = dloss * (exp(logits - lse) - onehot(target)), recomputing the softmax
from the saved lse, with expm1 at the target for the same reason: every column gets
dloss * p, and the thread that holds the target's column then stores dloss * (p - 1) over
it, from the target's logit it read first (a choice per column computed expm1 for every
one, and the column index it compared: most of the kernel's instructions). Each element
is read and then written by the same thread, so dlogits may be logits itself: the (N, V)
logits buffer becomes its own gradient in place.

Forward + backward: the forward's pass, then the backward's over the same row in the same
block, writing dlogits over the logits; the logsumexp stays in registers, as the row max
and the log of the rest, which also spares the gradient the rounding of a float32 lse
(large logits: the unfused backward's relative error is |lse| u). The second read
of the row comes from L2 when the row is still there (a float32 row of V = 50304 is
201 KB, a bf16 one 101 KB). One launch, no lse array.

Every exponential but the target's expm1 is ``precision.exp_approx`` (the special-function
unit's ex2, 2 ulp plus |x| 2**-24): two per logit, the kernels' largest cost after the
memory traffic, at two instructions each instead of libdevice's ten. The error it adds is
that of the float32 arithmetic already there (|x - max| u in each term).

The gradient pass reads a chunk before it writes any of it: writing in place, each store
would otherwise hold the next load until the store's own load had come back.

Mixed precision: logits and dlogits may be bf16 (uint16 arrays, ``kernels/precision.py``):
the LM head's GEMM writes bf16 logits, and dlogits is the operand of the two GEMMs after
it. The arithmetic, the statistics and the loss are float32 either way, and a bf16 row is
overwritten by its bf16 gradient in place: no float32 copy of the logits exists.
"""
import functools
import math

import numpy as np
from numba import cuda, float32, int32, uint16

from .atoms import load_float32, store_float32
from .cache import jit
from .common import (REDUCE_SCRATCH, WARP, block_max, block_sum, check_array,
                     check_block_size, check_not_empty, row_block)
from .precision import GROUP, check_activation, exp_approx, group_loader, group_storer, group_width

ONE = np.float32(1.0)
ZERO = np.float32(0.0)

BLOCK = 512      # V = 50304 gives each thread ~100 columns
UNROLL = 4       # groups of a row a thread reads together


# ----------------------------------------------------------------------------------
# kernels, made per group width (1, or precision.GROUP elements in one vector access): a
# row's groups are dealt to the block's threads in turn, group g to thread g % blockDim,
# and a thread reads UNROLL of its groups before it uses them

@functools.cache
def _crossentropy_kernels(width):
    """(forward, backward, forward + backward) over rows read in groups of width."""
    load, store = group_loader(width), group_storer(width)
    CHUNK = UNROLL * width         # a thread's elements read together

    @cuda.jit(device=True, inline=True)
    def load_chunk(x, logits, row, chunk, fill):
        """x[:CHUNK] = the thread's UNROLL groups of the row from group chunk on (each
        blockDim apart); fill past the row's end."""
        n_groups = logits.shape[1] // width
        for u in range(UNROLL):
            g = chunk + u * cuda.blockDim.x
            if g < n_groups:
                load(x, u * width, logits, (row, g * width))
            else:
                for e in range(width):
                    x[u * width + e] = fill

    @cuda.jit(device=True, inline=True)
    def row_statistics(logits, row, target, scratch):
        """(row max, log of sum(exp(x - row max)), the target's logit) of one row; every
        thread of the block calls. The target's logit is read by the thread whose groups
        hold it, (target // width) % blockDim, the one that writes the loss and the
        target's gradient (0 elsewhere): it reads the column before it writes it."""
        tid, n_threads = cuda.threadIdx.x, cuda.blockDim.x
        # online over this thread's chunks: the running max, and the sum of exp(x - max)
        # over every column but the max itself (its term is exactly 1, kept out so that
        # log1p can resolve a sum of 1 + tiny: the loss of a confidently right token)
        running_max = float32(-math.inf)
        running_rest = float32(0.0)
        x = cuda.local.array(CHUNK, float32)
        for chunk in range(tid, logits.shape[1] // width, UNROLL * n_threads):
            load_chunk(x, logits, row, chunk, float32(-math.inf))
            chunk_max = x[0]        # the chunk's first group is in the row
            for i in range(CHUNK):
                chunk_max = max(chunk_max, x[i])
            # a new max: the old one joins the rest, and the first column holding the new
            # one stays out of it
            skip = chunk_max > running_max
            if skip:
                running_rest = (running_rest + ONE) * exp_approx(running_max - chunk_max)
                running_max = chunk_max
            for i in range(CHUNK):
                if skip and x[i] == running_max:
                    skip = False
                else:
                    running_rest += exp_approx(x[i] - running_max)
        row_max = block_max(running_max, scratch)

        # every thread's own max joins the row's rest, except one thread holding the
        # row's max: the lowest-numbered one. A thread that saw no column has rescale
        # exp(-inf) = 0.
        holds_row_max = running_max == row_max
        owner = -block_max(float32(-tid) if holds_row_max else float32(-math.inf), scratch)
        rescale = exp_approx(running_max - row_max)
        own_max_term = ZERO if float32(tid) == owner else rescale
        row_rest = block_sum(running_rest * rescale + own_max_term, scratch)
        target_logit = (load_float32(logits, (row, target))
                        if tid == (target // width) % n_threads else ZERO)
        return row_max, math.log1p(row_rest), target_logit

    @cuda.jit(device=True, inline=True)
    def write_row_gradient(dlogits, logits, row, shift, log_sum, target, target_logit,
                           dloss):
        """dlogits[row] = dloss * (softmax - onehot(target)), with log p = (x - shift) -
        log_sum and shift + log_sum the row's logsumexp; each column is read and then
        written by one thread, so dlogits may be logits (target_logit read before)."""
        # a chunk is read before any of it is written: in place, a store would otherwise
        # hold the next read until the store's own read came back
        x = cuda.local.array(CHUNK, float32)
        n_threads, n_groups = cuda.blockDim.x, logits.shape[1] // width
        for chunk in range(cuda.threadIdx.x, n_groups, UNROLL * n_threads):
            load_chunk(x, logits, row, chunk, ZERO)
            for u in range(UNROLL):
                g = chunk + u * n_threads
                if g < n_groups:
                    for e in range(width):
                        x[u * width + e] = dloss * exp_approx((x[u * width + e] - shift)
                                                              - log_sum)
                    store(dlogits, (row, g * width), x, u * width)
        # p - 1 at the target, as expm1 (exact when the target is all but certain), over
        # the p its group's store wrote: by the thread that stored it, so it lands after
        if cuda.threadIdx.x == (target // width) % n_threads:
            store_float32(dlogits, (row, target),
                          dloss * math.expm1((target_logit - shift) - log_sum))

    @jit
    def crossentropy_forward_kernel(losses, lse, logits, targets):
        # losses (N,), lse (N,), logits (N, V) float32 or bf16, targets (N,) int32;
        # block = row
        scratch = cuda.shared.array(REDUCE_SCRATCH, float32)
        row, tid = cuda.blockIdx.x, cuda.threadIdx.x
        target = targets[row]
        row_max, log_sum, target_logit = row_statistics(logits, row, target, scratch)
        if tid == 0:
            lse[row] = row_max + log_sum
        if tid == (target // width) % cuda.blockDim.x:
            # both terms are >= 0, so the loss keeps its relative accuracy however small
            losses[row] = (row_max - target_logit) + log_sum

    @jit
    def crossentropy_backward_kernel(dlogits, logits, lse, targets, dloss):
        # dlogits (N, V), logits (N, V) (may be the same array), each float32 or bf16,
        # lse (N,), targets (N,) int32, dloss float32; block = row
        row = cuda.blockIdx.x
        target = targets[row]
        # the target's column is written by its owner alone, after this read (the other
        # threads' reads of it are not used)
        write_row_gradient(dlogits, logits, row, lse[row], ZERO, target,
                           load_float32(logits, (row, target)), dloss)

    @jit
    def crossentropy_forward_backward_kernel(losses, logits, targets, dloss):
        # losses (N,), logits (N, V) float32 or bf16, overwritten by dlogits, targets (N,)
        # int32, dloss float32; block = row. The row is read twice (the statistics, then
        # the gradient), by the same thread per column, and written once. The logsumexp
        # stays split as row max + log_sum: x - row max is exact near the max, so log p
        # carries no rounding of a large logsumexp (as a saved float32 lse does: |lse| u
        # relative in every p).
        scratch = cuda.shared.array(REDUCE_SCRATCH, float32)
        row = cuda.blockIdx.x
        target = targets[row]
        row_max, log_sum, target_logit = row_statistics(logits, row, target, scratch)
        if cuda.threadIdx.x == (target // width) % cuda.blockDim.x:
            losses[row] = (row_max - target_logit) + log_sum
        write_row_gradient(logits, logits, row, row_max, log_sum, target, target_logit,
                           dloss)

    return (crossentropy_forward_kernel, crossentropy_backward_kernel,
            crossentropy_forward_backward_kernel)


_ROWS, _BF16_ROWS, _VECTOR, _TARGETS = float32[:, ::1], uint16[:, ::1], float32[::1], int32[::1]
PTX_SIGNATURES = [
    signature for width in (1, GROUP) for signature in [
        (_crossentropy_kernels(width)[0], (_VECTOR, _VECTOR, _ROWS, _TARGETS)),
        (_crossentropy_kernels(width)[0], (_VECTOR, _VECTOR, _BF16_ROWS, _TARGETS)),
        (_crossentropy_kernels(width)[1], (_ROWS, _ROWS, _VECTOR, _TARGETS, float32)),
        (_crossentropy_kernels(width)[1], (_BF16_ROWS, _BF16_ROWS, _VECTOR, _TARGETS,
                                           float32)),
        (_crossentropy_kernels(width)[2], (_VECTOR, _ROWS, _TARGETS, float32)),
        (_crossentropy_kernels(width)[2], (_VECTOR, _BF16_ROWS, _TARGETS, float32))]] + [
    # a padded vocabulary: the tokens' columns of the logits, a view
    (_crossentropy_kernels(1)[i], (*head, rows, _TARGETS, *tail))
    for rows in (float32[:, :], uint16[:, :])
    for i, head, tail in ((0, (_VECTOR, _VECTOR), ()), (2, (_VECTOR,), (float32,)))]


# ----------------------------------------------------------------------------------
# launchers

def _check_rows(logits, targets):
    """The shapes every pass shares; returns (N, V). Targets are not range-checked here
    (that would copy them to the host): the model checks token ids when they arrive.
    logits may be a view of the first V columns of wider rows (a padded vocabulary's
    tokens in use), which the kernels read element by element."""
    if len(logits.shape) != 2:
        raise ValueError(f"logits: expected shape (N, V), got {tuple(logits.shape)}")
    N, V = logits.shape
    check_not_empty("V", V)
    check_activation("logits", logits, (N, V), strided=True)
    check_array("targets", targets, (N,), np.int32)
    return N, V


def _width(V, *arrays):
    """The group width of the kernels for these rows: one element at a time for a view."""
    return group_width(V, *arrays) if all(a.is_c_contiguous() for a in arrays) else 1


def crossentropy_forward(losses, lse, logits, targets, *, stream=0, block=None):
    """losses (N,) = lse - logits[target] and lse (N,) = logsumexp of each row of logits
    (N, V), float32 or bf16, for targets (N,) int32."""
    N, V = _check_rows(logits, targets)
    check_array("lse", lse, (N,))
    block = row_block(V, BLOCK) if block is None else block
    check_block_size(block, WARP)
    check_array("losses", losses, (N,))
    if N == 0:
        return
    _crossentropy_kernels(_width(V, logits))[0][N, block, stream](losses, lse, logits,
                                                                  targets)


def crossentropy_backward(dlogits, logits, lse, targets, dloss, *, stream=0, block=None):
    """dlogits (N, V) = dloss * (softmax(logits) - onehot(targets)), dloss a float (1/N
    for the mean loss); dlogits may be logits itself (in place). Each is float32 or bf16."""
    N, V = _check_rows(logits, targets)
    check_array("lse", lse, (N,))
    block = row_block(V, BLOCK) if block is None else block
    check_block_size(block)
    check_activation("dlogits", dlogits, (N, V))
    if N == 0:
        return
    width = _width(V, dlogits, logits)
    _crossentropy_kernels(width)[1][N, block, stream](dlogits, logits, lse, targets,
                                                      np.float32(dloss))


def crossentropy_forward_backward(losses, logits, targets, dloss, *, stream=0, block=None):
    """losses (N,) as crossentropy_forward's, and logits (N, V), float32 or bf16,
    overwritten by dlogits = dloss * (softmax(logits) - onehot(targets)), in one launch."""
    N, V = _check_rows(logits, targets)
    block = row_block(V, BLOCK) if block is None else block
    check_block_size(block, WARP)
    check_array("losses", losses, (N,))
    if N == 0:
        return
    _crossentropy_kernels(_width(V, logits))[2][N, block, stream](
        losses, logits, targets, np.float32(dloss))
