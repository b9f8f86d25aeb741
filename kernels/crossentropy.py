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

import numba
import numpy as np
from numba import cuda, float32, int32, int64, uint16, uint32

from .atoms import (cp_async_16, cp_async_commit, cp_async_wait_group, load_float32,
                    load_words4, pack_bf16x2, shared_address, store_float32, store_words4)
from .cache import jit
from .common import (REDUCE_SCRATCH, WARP, block_max, block_sum, ceil_div, check_array,
                     check_block_size, check_not_empty, device_address, row_block)
from .device import DYNAMIC_SHARED_LIMIT, allow_dynamic_shared
from .precision import (GROUP, check_activation, exp_approx, group_loader, group_storer,
                        group_width, is_bf16, unpack_bf16x2)

ONE = np.float32(1.0)
ZERO = np.float32(0.0)

BLOCK = 512      # V = 50304 gives each thread ~100 columns
# The staged kernel's threads a row: enough to give each at least this many 16-byte chunks
# (at most BLOCK). A block's fixed cost, its three reductions and the load's latency, is
# paid per row, so a short row wants few threads: at V = 4096 (bf16: 512 chunks; H200,
# bench/h200-2026-12-04-s24/gemm/callA/bw_12m.md, 8192 rows) 512 threads of one chunk took
# 0.132 ms, 128 of 4 0.061, 32 of 16 (a warp a row) 0.043 (3.1 TB/s)
STAGED_CHUNKS = 16
UNROLL = 4       # groups of a row a thread reads together


# ----------------------------------------------------------------------------------
# the online statistics both fused kernels share: a thread's (running max, sum of
# exp(x - max) over its other columns), then the block's row max and log of the rest

@functools.cache
def _online_pair(length):
    """The device function (x, running max, running rest) -> the pair updated by the
    length values of x (its first one a column of the row; -inf fills the others)."""
    @cuda.jit(device=True, inline=True)
    def accumulate(x, running_max, running_rest):
        chunk_max = x[0]
        for i in range(length):
            chunk_max = max(chunk_max, x[i])
        # a new max: the old one joins the rest, and the first column holding the new one
        # stays out of it (its term is exactly 1, kept out so that log1p can resolve a
        # sum of 1 + tiny: the loss of a confidently right token)
        skip = chunk_max > running_max
        if skip:
            running_rest = (running_rest + ONE) * exp_approx(running_max - chunk_max)
            running_max = chunk_max
        for i in range(length):
            if skip and x[i] == running_max:
                skip = False
            else:
                running_rest += exp_approx(x[i] - running_max)
        return running_max, running_rest
    return accumulate


@cuda.jit(device=True, inline=True)
def row_log_sum(running_max, running_rest, scratch):
    """(row max, log of sum(exp(x - row max))) from every thread's online pair; every
    thread of the block calls. Every thread's own max joins the row's rest, except one
    thread holding the row's max: the lowest-numbered one. A thread that saw no column
    has rescale exp(-inf) = 0."""
    tid = cuda.threadIdx.x
    row_max = block_max(running_max, scratch)
    holds_row_max = running_max == row_max
    owner = -block_max(float32(-tid) if holds_row_max else float32(-math.inf), scratch)
    rescale = exp_approx(running_max - row_max)
    own_max_term = ZERO if float32(tid) == owner else rescale
    row_rest = block_sum(running_rest * rescale + own_max_term, scratch)
    return row_max, math.log1p(row_rest)


# ----------------------------------------------------------------------------------
# kernels, made per group width (1, or precision.GROUP elements in one vector access): a
# row's groups are dealt to the block's threads in turn, group g to thread g % blockDim,
# and a thread reads UNROLL of its groups before it uses them

@functools.cache
def _crossentropy_kernels(width):
    """(forward, backward, forward + backward) over rows read in groups of width."""
    load, store = group_loader(width), group_storer(width)
    CHUNK = UNROLL * width         # a thread's elements read together
    accumulate = _online_pair(CHUNK)

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
        # online over this thread's chunks
        running_max = float32(-math.inf)
        running_rest = float32(0.0)
        x = cuda.local.array(CHUNK, float32)
        for chunk in range(tid, logits.shape[1] // width, UNROLL * n_threads):
            load_chunk(x, logits, row, chunk, float32(-math.inf))
            running_max, running_rest = accumulate(x, running_max, running_rest)
        row_max, log_sum = row_log_sum(running_max, running_rest, scratch)
        target_logit = (load_float32(logits, (row, target))
                        if tid == (target // width) % n_threads else ZERO)
        return row_max, log_sum, target_logit

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


# ----------------------------------------------------------------------------------
# the forward + backward over a row staged in shared memory: the row read from global
# memory once (cp.async, 16-byte chunks), both passes over shared memory

CHUNK_BYTES = 16                 # one cp.async, one vector access of shared memory
STAGED_BYTES = DYNAMIC_SHARED_LIMIT - 1024    # the widest row staged (the rest: scratch)
wait_first, wait_all = cp_async_wait_group(1), cp_async_wait_group(0)


@cuda.jit(device=True, inline=True)
def _unpack_bf16_words(x, words):
    """x[:8] = the 4 bf16 pairs of words as float32."""
    for w in range(GROUP):
        x[2 * w], x[2 * w + 1] = unpack_bf16x2(words[w])


@cuda.jit(device=True, inline=True)
def _pack_bf16_words(x):
    return (pack_bf16x2(x[0], x[1]), pack_bf16x2(x[2], x[3]), pack_bf16x2(x[4], x[5]),
            pack_bf16x2(x[6], x[7]))


@cuda.jit(device=True, inline=True)
def _bf16_element(words, i):
    """Element i of the bf16 pairs in words, as float32."""
    low, high = unpack_bf16x2(words[i // 2])
    return high if i % 2 else low


@cuda.jit(device=True, inline=True)
def _float32_element(words, i):
    return words[i]


@cuda.jit(device=True, inline=True)
def _unpack_float32_words(x, words):
    for w in range(GROUP):
        x[w] = words[w]


@cuda.jit(device=True, inline=True)
def _pack_float32_words(x):
    return x[0], x[1], x[2], x[3]


@functools.cache
def _staged_kernel(bf16):
    """The forward + backward over rows of words: uint32 bf16 pairs (bf16) or float32."""
    word = uint32 if bf16 else float32
    unpack = _unpack_bf16_words if bf16 else _unpack_float32_words
    pack = _pack_bf16_words if bf16 else _pack_float32_words
    element = _bf16_element if bf16 else _float32_element
    E = GROUP * (2 if bf16 else 1)        # elements of a chunk (GROUP words)
    accumulate = _online_pair(E)

    @jit
    def crossentropy_forward_backward_staged_kernel(losses, rows, targets, dloss):
        # losses (N,), rows (N, W) the logits' words, W a multiple of GROUP, overwritten
        # by dlogits; targets (N,) int32, dloss float32; block = row; dynamic shared
        # memory: a row and CHUNK_BYTES. Chunk c (GROUP words) is copied, read and
        # written by thread c % blockDim alone, so the staging needs no barrier: a
        # thread's cp.async wait makes its own copies visible to it.
        scratch = cuda.shared.array(REDUCE_SCRATCH, float32)
        raw = cuda.shared.array(0, word)
        staged = raw[int32((CHUNK_BYTES - shared_address(raw, 0) % CHUNK_BYTES)
                           % CHUNK_BYTES // 4):]
        row, tid, n_threads = cuda.blockIdx.x, cuda.threadIdx.x, cuda.blockDim.x
        target = targets[row]
        n_chunks = rows.shape[1] // GROUP
        start = int64(row) * rows.shape[1]
        # the first half of each thread's chunks in one group of copies, the rest in a
        # second: the first half's statistics run while the second lands
        split = (n_chunks + n_threads - 1) // n_threads // 2 * n_threads
        for c in range(tid, split, n_threads):
            cp_async_16(staged, int32(c * GROUP), rows, start + c * GROUP, uint32(16))
        cp_async_commit()
        for c in range(tid + split, n_chunks, n_threads):
            cp_async_16(staged, int32(c * GROUP), rows, start + c * GROUP, uint32(16))
        cp_async_commit()

        x = cuda.local.array(E, float32)
        running_max = float32(-math.inf)
        running_rest = float32(0.0)
        wait_first()
        for c in range(tid, split, n_threads):
            unpack(x, load_words4(staged, c * GROUP))
            running_max, running_rest = accumulate(x, running_max, running_rest)
        wait_all()
        for c in range(tid + split, n_chunks, n_threads):
            unpack(x, load_words4(staged, c * GROUP))
            running_max, running_rest = accumulate(x, running_max, running_rest)
        row_max, log_sum = row_log_sum(running_max, running_rest, scratch)

        # the target's chunk is its owner's: the loss, and p - 1 at the target as expm1
        # (exact when the target is all but certain) in that chunk's gradient
        # (x is indexed by constants alone, so that it stays in registers)
        target_chunk, target_at = target // E, target % E
        target_logit = ZERO
        if tid == target_chunk % n_threads:
            target_logit = element(staged, target)
            losses[row] = (row_max - target_logit) + log_sum
        for c in range(tid, n_chunks, n_threads):
            unpack(x, load_words4(staged, c * GROUP))
            for i in range(E):
                x[i] = dloss * exp_approx((x[i] - row_max) - log_sum)
            if c == target_chunk:
                target_grad = dloss * math.expm1((target_logit - row_max) - log_sum)
                for i in range(E):
                    x[i] = target_grad if i == target_at else x[i]
            store_words4(rows, (row, c * GROUP), pack(x))

    return crossentropy_forward_backward_staged_kernel



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
    for i, head, tail in ((0, (_VECTOR, _VECTOR), ()), (2, (_VECTOR,), (float32,)))] + [
    (_staged_kernel(bf16), (_VECTOR, words, _TARGETS, float32))
    for bf16, words in ((True, uint32[:, ::1]), (False, _ROWS))]


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


def can_stage(logits):
    """Whether the forward + backward can stage these rows in shared memory: contiguous
    rows of whole 16-byte chunks from a 16-byte boundary, each within STAGED_BYTES."""
    row_bytes = logits.shape[1] * logits.dtype.itemsize
    return (logits.is_c_contiguous() and row_bytes % CHUNK_BYTES == 0
            and row_bytes <= STAGED_BYTES and device_address(logits) % CHUNK_BYTES == 0)


def crossentropy_forward_backward(losses, logits, targets, dloss, *, stream=0, block=None,
                                  stage=None):
    """losses (N,) as crossentropy_forward's, and logits (N, V), float32 or bf16,
    overwritten by dlogits = dloss * (softmax(logits) - onehot(targets)), in one launch.
    stage: the row in shared memory, read from global memory once (None: where can_stage
    allows), or False: read twice, the second time mostly from L2 (rows too
    wide for shared memory, views of a padded vocabulary)."""
    N, V = _check_rows(logits, targets)
    staged = can_stage(logits) if stage is None else stage
    if staged and not can_stage(logits):
        raise ValueError(f"logits: rows of {V} x {logits.dtype.itemsize} bytes cannot be "
                         f"staged (contiguous, 16-byte chunks, at most {STAGED_BYTES} bytes)")
    words = V * logits.dtype.itemsize // 4
    if block is None:
        block = row_block(ceil_div(words // GROUP, STAGED_CHUNKS) if staged else V, BLOCK)
    check_block_size(block, WARP)
    check_array("losses", losses, (N,))
    if N == 0:
        return
    if not staged:
        _crossentropy_kernels(_width(V, logits))[2][N, block, stream](
            losses, logits, targets, np.float32(dloss))
        return
    rows = logits.view(np.uint32) if is_bf16(logits) else logits
    args = (losses, rows, targets, np.float32(dloss))
    kernel, shared = _staged_kernel(is_bf16(logits)), 4 * words + CHUNK_BYTES
    allow_dynamic_shared(kernel, tuple(map(numba.typeof, args)), shared)
    kernel[N, block, stream, shared](*args)
