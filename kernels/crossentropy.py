"""Softmax cross-entropy over the vocabulary, forward and backward, one block per row.

NumPy twins: ``microgpt.reference.crossentropy_forward`` and ``crossentropy_backward``.

Forward: each thread walks its strided columns of the row once (coalesced across the
block), keeping an online pair (running max, sum of exp(x - max) over its other columns);
the block combines the pairs (a block max, then a block sum of the rescaled sums). It
writes the row's logsumexp and loss = (max - logits[target]) + log1p(sum): the max's own
term of 1 is kept out of the sum so that the loss of a confidently right token (1 + tiny)
keeps its relative accuracy. No probabilities tensor is written.

Backward: dlogits = dloss * (exp(logits - lse) - onehot(target)), recomputing the softmax
from the saved lse, with expm1 at the target for the same reason. Each element is read and
then written by the same thread, so dlogits may be logits itself: the (N, V) logits buffer
becomes its own gradient in place.
"""
import math

import numpy as np
from numba import cuda, float32, int32

from microgpt.kernels.common import (REDUCE_SCRATCH, WARP, block_max, block_sum,
                                     check_array, check_block_size, check_not_empty,
                                     row_block)

ONE = np.float32(1.0)
ZERO = np.float32(0.0)

BLOCK = 512      # V = 50304 gives each thread ~100 columns


# ----------------------------------------------------------------------------------
# kernels

@cuda.jit
def _crossentropy_forward_kernel(losses, lse, logits, targets):
    # losses (N,), lse (N,), logits (N, V), targets (N,) int32; block = row
    scratch = cuda.shared.array(REDUCE_SCRATCH, float32)
    row = cuda.blockIdx.x
    tid, n_threads = cuda.threadIdx.x, cuda.blockDim.x
    V = logits.shape[1]

    # online over this thread's columns: the running max, and the sum of exp(x - max) over
    # every column but the max itself (its term is exactly 1, kept out so that log1p can
    # resolve a sum of 1 + tiny: the loss of a confidently right token)
    running_max = float32(-math.inf)
    running_rest = float32(0.0)
    for j in range(tid, V, n_threads):
        x = logits[row, j]
        if x > running_max:
            # the old max joins the rest
            running_rest = (running_rest + ONE) * math.exp(running_max - x)
            running_max = x
        else:
            running_rest += math.exp(x - running_max)
    row_max = block_max(running_max, scratch)

    # every thread's own max joins the row's rest, except one thread holding the row's max:
    # the lowest-numbered one. A thread that saw no column has rescale exp(-inf) = 0.
    holds_row_max = running_max == row_max
    owner = -block_max(float32(-tid) if holds_row_max else float32(-math.inf), scratch)
    rescale = math.exp(running_max - row_max)
    own_max_term = ZERO if float32(tid) == owner else rescale
    row_rest = block_sum(running_rest * rescale + own_max_term, scratch)
    if tid == 0:
        log_sum = math.log1p(row_rest)            # log of sum(exp(x - row_max))
        lse[row] = row_max + log_sum
        # both terms are >= 0, so the loss keeps its relative accuracy however small
        losses[row] = (row_max - logits[row, targets[row]]) + log_sum


@cuda.jit
def _crossentropy_backward_kernel(dlogits, logits, lse, targets, dloss):
    # dlogits (N, V), logits (N, V) (may be the same array), lse (N,), targets (N,) int32,
    # dloss float32; block = row
    row = cuda.blockIdx.x
    row_lse, target = lse[row], targets[row]
    for j in range(cuda.threadIdx.x, logits.shape[1], cuda.blockDim.x):
        log_p = logits[row, j] - row_lse
        # p - 1 at the target as expm1: exact when the target is all but certain
        dlogits[row, j] = dloss * (math.expm1(log_p) if j == target else math.exp(log_p))


PTX_SIGNATURES = [
    (_crossentropy_forward_kernel, (float32[::1], float32[::1], float32[:, ::1],
                                    int32[::1])),
    (_crossentropy_backward_kernel, (float32[:, ::1], float32[:, ::1], float32[::1],
                                     int32[::1], float32)),
]


# ----------------------------------------------------------------------------------
# launchers

def _check_rows(logits, lse, targets):
    """The shapes both passes share; returns (N, V). Targets are not range-checked here
    (that would copy them to the host): the model checks token ids when they arrive."""
    if len(logits.shape) != 2:
        raise ValueError(f"logits: expected shape (N, V), got {tuple(logits.shape)}")
    N, V = logits.shape
    check_not_empty("V", V)
    check_array("logits", logits, (N, V))
    check_array("lse", lse, (N,))
    check_array("targets", targets, (N,), np.int32)
    return N, V


def crossentropy_forward(losses, lse, logits, targets, *, stream=0, block=None):
    """losses (N,) = lse - logits[target] and lse (N,) = logsumexp of each row of logits
    (N, V), for targets (N,) int32."""
    N, V = _check_rows(logits, lse, targets)
    block = row_block(V, BLOCK) if block is None else block
    check_block_size(block, WARP)
    check_array("losses", losses, (N,))
    if N == 0:
        return
    _crossentropy_forward_kernel[N, block, stream](losses, lse, logits, targets)


def crossentropy_backward(dlogits, logits, lse, targets, dloss, *, stream=0, block=None):
    """dlogits (N, V) = dloss * (softmax(logits) - onehot(targets)), dloss a float (1/N
    for the mean loss); dlogits may be logits itself (in place)."""
    N, V = _check_rows(logits, lse, targets)
    block = row_block(V, BLOCK) if block is None else block
    check_block_size(block)
    check_array("dlogits", dlogits, (N, V))
    if N == 0:
        return
    _crossentropy_backward_kernel[N, block, stream](dlogits, logits, lse, targets,
                                                    np.float32(dloss))
