"""Token + position embedding, forward and backward (the "encoder", as llm.c calls it).

NumPy twins: ``microgpt.reference.encoder_forward`` and ``encoder_backward``.

Forward: out[b, t, c] = wte[idx[b, t], c] + wpe[t, c], a thread per 4 columns of one
position in one 16-byte access of each array (``precision.group_width``: C a multiple of 4,
the arrays on 16-byte boundaries; else a thread per element).

Backward, two ways. The same token may appear anywhere in the batch, and wte also
receives the tied LM head's gradient:
- by default, fused into one launch: a thread per (t, c) walks the batch, scatter-adding
  each dout[b, t, c] into dwte[idx[b, t], c] with a float atomic and summing the batch for
  dwpe[t, c], which it owns alone. The atomics add each row in the order the threads
  come, so two runs of a step can differ by a rounding (and every later step with them);
- deterministic (``CudaBackend(deterministic=True)``, the trainer's --deterministic):
  no float atomics, each element of dwte one thread's sum in an order fixed by the data.
  It costs more than the atomics (docs/convergence.md, "Reproducible runs"), so it is not
  the default:
1. the N = B * T positions sorted by (token, position), in segments of a block's
   positions: each block ranks its positions among the segment's positions of the same
   token (in shared memory) and writes each token's count there; the counts summed into
   each token's start (a block per tile of the vocabulary); each position placed at its token's start, plus the
   token's counts in the earlier segments, plus its rank. Each token's positions are then
   one run of the sorted order, in position order, at a cost bounded by the segment's
   size whatever the tokens. (Session 19's counting sort placed the positions by integer
   atomics, in no fixed order, then counted each position's rank against its token's
   whole bucket: quadratic in a common token's count, 0.149 ms on a Zipf law's tokens);
2. a thread per (chunk of CHUNK sorted positions, column) sums the chunk's leading
   segment where its token's run began in an earlier chunk;
3. a thread per (chunk, column) sums each run that begins in its chunk and adds the
   leading segments of the chunks the run goes on into (its end known from its token's
   start and count), in order, to dwte[token, column]: one thread owns each element of
   dwte;
4. a thread per (t, column) sums the batch into dwpe[t, column], which it owns alone.
Consecutive threads take consecutive columns, so the reads of dout and the writes of
dwte are coalesced. The sorted order and the chunks' sums are scratch kept with dwte's
memory (common.kept_with).
"""
import functools

import numpy as np
from numba import cuda, float32, int32, int64

from .cache import jit
from .common import SIMULATOR, ceil_div, check_array, check_block_size, fill_zero, kept_with
from .device import GROUP
from .precision import group_loader, group_storer, group_width

BLOCK = 256
CHUNK = 32          # sorted positions per thread of the run sums
# the threads of a block that sums the tokens' counts into their starts, a tile of the
# vocabulary each (the simulator's vocabularies, a few tokens, take several of 4)
SCAN_THREADS = 4 if SIMULATOR else 1024
MAX_SEGMENT = 1024  # positions a block of the sort ranks in shared memory: the most threads


# ----------------------------------------------------------------------------------
# kernels

@functools.cache
def _encoder_forward_kernel(width):
    """The forward with a thread per width columns of one position (1, or GROUP in one
    16-byte access of each array)."""
    load, store = group_loader(width), group_storer(width)

    @jit
    def encoder_forward_kernel(out, idx, wte, wpe):
        # out (B, T, C), idx (B, T) int32, wte (V, C), wpe (context, C)
        B, T, C = out.shape
        groups = C // width
        i = cuda.grid(1)
        if i < B * T * groups:
            bt, g = divmod(i, groups)
            b, t = divmod(bt, T)
            x = cuda.local.array(width, float32)
            p = cuda.local.array(width, float32)
            load(x, 0, wte, (idx[b, t], g * width))
            load(p, 0, wpe, (t, g * width))
            for e in range(width):
                x[e] += p[e]
            store(out, (b, t, g * width), x, 0)
    return encoder_forward_kernel


@jit
def _encoder_backward_atomic_kernel(dwte, dwpe, dout, idx):
    # dwte (V, C) +=, dwpe (context, C) +=, dout (B, T, C), idx (B, T) int32; a thread
    # per (t, c), its batch's rows of dwte added by float atomics
    B, T, C = dout.shape
    i = cuda.grid(1)
    if i < T * C:
        t, c = divmod(i, C)
        batch_sum = float32(0.0)
        for b in range(B):
            g = dout[b, t, c]
            batch_sum += g
            cuda.atomic.add(dwte, (idx[b, t], c), g)
        dwpe[t, c] += batch_sum


@jit
def _segment_ranks_kernel(slots, hist, counts, tokens):
    # tokens (N,) int32 in segments of a block's positions, a block each: slots (N,) = the
    # count of position p's token among the segment's positions before p; hist (V,
    # segments) = each token's count in each segment, by the thread of its last position
    # there (zeroed first: a token absent from a segment keeps 0); counts (V,) += the same
    # counts (an integer atomic, exact in any order). Every thread compares its token
    # with each of the segment's, read from shared memory by all at once.
    t, segment, size = cuda.threadIdx.x, cuda.blockIdx.x, cuda.blockDim.x
    first = segment * size
    end = min(tokens.shape[0], first + size)
    here = cuda.shared.array(MAX_SEGMENT, int32)
    p = first + t
    token = tokens[p] if p < end else int32(-1)
    here[t] = token
    cuda.syncthreads()
    if p < end:
        before, after = int32(0), int32(0)
        for j in range(end - first):
            if here[j] == token:
                if j < t:
                    before += 1
                elif j > t:
                    after += 1
        slots[p] = before
        if after == 0:
            hist[token, segment] = before + 1
            cuda.atomic.add(counts, token, before + 1)


@jit
def _token_starts_kernel(starts, counts):
    # starts (V,) int32 = the exclusive prefix sums of counts (V,), a block (of a power of
    # two threads) per tile of the vocabulary: the sum of the tiles before its own (each
    # thread a strided share, so that the reads coalesce, then the block's tree), plus
    # the scan of its own tile in shared memory
    V = counts.shape[0]
    t, size = cuda.threadIdx.x, cuda.blockDim.x
    first = cuda.blockIdx.x * size
    part = cuda.shared.array(SCAN_THREADS, int32)
    total = int32(0)
    for v in range(t, first, size):
        total += counts[v]
    part[t] = total
    cuda.syncthreads()
    half = size // 2
    while half > 0:
        if t < half:
            part[t] += part[t + half]
        cuda.syncthreads()
        half //= 2
    before = part[0]
    cuda.syncthreads()
    v = first + t
    own = counts[v] if v < V else int32(0)
    part[t] = own
    cuda.syncthreads()
    offset = 1
    while offset < size:            # part[t] = the sum of the tile's first t + 1 counts
        earlier = part[t - offset] if t >= offset else int32(0)
        cuda.syncthreads()
        part[t] += earlier
        cuda.syncthreads()
        offset *= 2
    if v < V:
        starts[v] = before + part[t] - own


@jit
def _place_positions_kernel(order, sorted_tokens, tokens, starts, hist, slots, segment_size):
    # order (N,) int32 = the positions sorted by (token, position): position p at its
    # token's start, plus the token's counts in the segments (of segment_size positions,
    # hist (V, segments)) before p's, plus its slot in its own; sorted_tokens (N,) = their
    # tokens
    p = cuda.grid(1)
    if p < tokens.shape[0]:
        token = tokens[p]
        at = starts[token] + slots[p]
        for segment in range(p // segment_size):
            at += hist[token, segment]
        order[at] = p
        sorted_tokens[at] = token


@cuda.jit(device=True, inline=True)
def _segment_sum(rows, order, first, end, c):
    """The sum of column c of rows (N, C), dout flattened, over the sorted positions
    [first, end), in order."""
    total = float32(0.0)
    for r in range(first, end):
        total += rows[order[r], c]
    return total


@jit
def _chunk_leads_kernel(leads, order, sorted_tokens, starts, counts, rows, chunk):
    # leads (chunks, C) = the sum of rows (N, C) over each chunk's leading segment of
    # order (N,) int32 where its token's run began in an earlier chunk (the others are
    # never read); a thread per (chunk, column). A token's run of the sorted order is
    # starts[token] .. starts[token] + counts[token] (V,).
    C = rows.shape[1]
    i = cuda.grid(1)
    if i < leads.shape[0] * C:
        k, c = divmod(i, C)
        first = k * chunk
        token = sorted_tokens[first]
        if starts[token] < first:
            end = min(first + chunk, starts[token] + counts[token])
            leads[k, c] = _segment_sum(rows, order, first, end, c)


@jit
def _run_sums_kernel(dwte, leads, order, sorted_tokens, starts, counts, rows, chunk):
    # dwte (V, C) += the sum of rows (N, C) over each token's run of order (N,) int32,
    # added by the thread of (the chunk the run begins in, column): its segment there,
    # then the leads (chunks, C) of the chunks it goes on into, in order
    C = rows.shape[1]
    N = order.shape[0]
    i = cuda.grid(1)
    if i < leads.shape[0] * C:
        k, c = divmod(i, C)
        first = k * chunk
        chunk_end = min(N, first + chunk)
        token = sorted_tokens[first]
        r = first
        if starts[token] < first:       # a run from an earlier chunk: its thread adds this
            r = min(chunk_end, starts[token] + counts[token])
        while r < chunk_end:
            token = sorted_tokens[r]
            run_end = starts[token] + counts[token]
            segment_end = min(chunk_end, run_end)
            total = _segment_sum(rows, order, r, segment_end, c)
            for j in range(k + 1, (run_end + chunk - 1) // chunk):
                total += leads[j, c]
            dwte[token, c] += total
            r = segment_end


@jit
def _position_sums_kernel(dwpe, dout):
    # dwpe (context, C) += dout (B, T, C) summed over the batch; a thread per (t, c)
    B, T, C = dout.shape
    i = cuda.grid(1)
    if i < T * C:
        t, c = divmod(i, C)
        batch_sum = float32(0.0)
        for b in range(B):
            batch_sum += dout[b, t, c]
        dwpe[t, c] += batch_sum


PTX_SIGNATURES = [
    *[(_encoder_forward_kernel(width), (float32[:, :, ::1], int32[:, ::1], float32[:, ::1],
                                         float32[:, ::1])) for width in (1, GROUP)],
    (_encoder_backward_atomic_kernel, (float32[:, ::1], float32[:, ::1], float32[:, :, ::1],
                                        int32[:, ::1])),
    (_segment_ranks_kernel, (int32[::1], int32[:, ::1], int32[::1], int32[::1])),
    (_token_starts_kernel, (int32[::1], int32[::1])),
    (_place_positions_kernel, (int32[::1], int32[::1], int32[::1], int32[::1], int32[:, ::1],
                               int32[::1], int64)),
    (_chunk_leads_kernel, (float32[:, ::1], int32[::1], int32[::1], int32[::1], int32[::1],
                           float32[:, ::1], int64)),
    (_run_sums_kernel, (float32[:, ::1], float32[:, ::1], int32[::1], int32[::1], int32[::1],
                        int32[::1], float32[:, ::1], int64)),
    (_position_sums_kernel, (float32[:, ::1], float32[:, :, ::1])),
]
# the default backward's scatter, which --deterministic replaces (tests/test_compile.py)
FLOAT_ATOMICS = {"_encoder_backward_atomic_kernel"}


# ----------------------------------------------------------------------------------
# launchers

def _check_shapes(out_name, out, idx, wte, wpe, wte_name, wpe_name):
    """The shapes both passes share; returns (B, T, C). Token ids are not range-checked
    here (that would copy them to the host): the model checks them when they arrive."""
    if len(idx.shape) != 2:
        raise ValueError(f"idx: expected shape (B, T), got {tuple(idx.shape)}")
    B, T = idx.shape
    if len(wte.shape) != 2:
        raise ValueError(f"{wte_name}: expected shape (V, C), got {tuple(wte.shape)}")
    V, C = wte.shape
    check_array("idx", idx, (B, T), np.int32)
    check_array(wte_name, wte, (V, C))
    if len(wpe.shape) != 2 or wpe.shape[1] != C or wpe.shape[0] < T:
        raise ValueError(f"{wpe_name}: expected shape (context >= {T}, {C}), "
                         f"got {tuple(wpe.shape)}")
    check_array(wpe_name, wpe, wpe.shape)
    check_array(out_name, out, (B, T, C))
    return B, T, C


def encoder_forward(out, idx, wte, wpe, *, stream=0, block=BLOCK):
    """out (B, T, C) = wte[idx] + wpe[:T]; idx (B, T) int32, wte (V, C), wpe (context, C)."""
    check_block_size(block)
    B, T, C = _check_shapes("out", out, idx, wte, wpe, "wte", "wpe")
    if out.size == 0:
        return
    width = group_width(C, out, wte, wpe)
    _encoder_forward_kernel(width)[ceil_div(B * T * (C // width), block), block, stream](
        out, idx, wte, wpe)


def encoder_backward(dwte, dwpe, dout, idx, *, deterministic=False, stream=0, block=BLOCK,
                     chunk=CHUNK):
    """dwte (V, C) += scatter-add of dout (B, T, C) by token; dwpe[:T] += dout summed over
    the batch. Both accumulate: zero them first for a plain gradient. deterministic: the
    same inputs give the same bits every time (no float atomics; chunk: sorted positions
    per thread of the run sums)."""
    check_block_size(block)
    if chunk < 1:
        raise ValueError(f"chunk must be at least 1, got {chunk}")
    B, T, C = _check_shapes("dout", dout, idx, dwte, dwpe, "dwte", "dwpe")
    if dout.size == 0:
        return
    if not deterministic:
        _encoder_backward_atomic_kernel[ceil_div(T * C, block), block, stream](dwte, dwpe,
                                                                               dout, idx)
        return
    V, N, chunks = dwte.shape[0], B * T, ceil_div(B * T, chunk)
    segments = ceil_div(N, block)
    # flat views: a position p is row p of dout and element p of idx, no division by T
    tokens, rows = idx.reshape(N), dout.reshape(N, C)
    order, sorted_tokens, slots = (
        kept_with(dwte, ("encoder " + name, N), lambda: cuda.device_array(N, np.int32))
        for name in ("order", "sorted tokens", "slots"))
    counts, starts = (kept_with(dwte, ("encoder " + name, V),
                                lambda: cuda.device_array(V, np.int32))
                      for name in ("counts", "starts"))
    hist = kept_with(dwte, ("encoder segment counts", V, segments),
                     lambda: cuda.device_array((V, segments), np.int32))
    leads = kept_with(dwte, ("encoder leads", chunks, C),
                      lambda: cuda.device_array((chunks, C), np.float32))
    fill_zero(counts, stream)
    fill_zero(hist, stream)
    _segment_ranks_kernel[segments, block, stream](slots, hist, counts, tokens)
    _token_starts_kernel[ceil_div(V, SCAN_THREADS), SCAN_THREADS, stream](starts, counts)
    _place_positions_kernel[segments, block, stream](order, sorted_tokens, tokens, starts,
                                                     hist, slots, block)
    sums = ceil_div(chunks * C, block)
    _chunk_leads_kernel[sums, block, stream](leads, order, sorted_tokens, starts, counts,
                                             rows, chunk)
    _run_sums_kernel[sums, block, stream](dwte, leads, order, sorted_tokens, starts, counts,
                                          rows, chunk)
    _position_sums_kernel[ceil_div(T * C, block), block, stream](dwpe, dout)
