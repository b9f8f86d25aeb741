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
1. the N = B * T positions sorted by (token, position), a counting sort: each position
   counts itself into its token's count (an integer atomic, exact in any order), which
   gives it a slot among its token's positions (in the order the threads come); one
   block sums the counts into each token's start; each position is written at its
   token's start plus its slot (a bucket per token, its positions in no fixed order),
   then at its token's start plus the count of its bucket's positions before it. Each
   token's positions are then one run of the sorted order, in position order. (Before,
   each position's rank was counted against all N keys, 16384^2 comparisons at
   andrea-120m: 0.69 ms, then 0.55 in tiles of keys in shared memory);
2. a thread per (chunk of CHUNK sorted positions, column) sums the chunk's leading
   segment (up to its first change of token): the part of a run that began in an
   earlier chunk, or, for a chunk inside a long run, all of it;
3. a thread per (chunk, column) sums each run that begins in its chunk, adding the
   leading segments of the chunks the run continues into, in order, and adds the total
   to dwte[token, column]: one thread owns each element of dwte;
4. a thread per (t, column) sums the batch into dwpe[t, column], which it owns alone.
Consecutive threads take consecutive columns, so the reads of dout and the writes of
dwte are coalesced. The sorted order and the chunks' sums are scratch kept with dwte's
memory (common.kept_with).
"""
import functools

import numpy as np
from numba import cuda, float32, int32, int64

from microgpt.kernels.cache import jit
from microgpt.kernels.common import SIMULATOR, ceil_div, check_array, check_block_size, fill_zero, kept_with
from microgpt.kernels.device import GROUP
from microgpt.kernels.precision import group_loader, group_storer, group_width

BLOCK = 256
CHUNK = 32          # sorted positions per thread of the run sums
# the threads of the one block that sums the tokens' counts into their starts, a segment
# of the vocabulary each (the simulator's vocabularies, a few tokens, take several of 4)
SCAN_THREADS = 4 if SIMULATOR else 1024


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
def _count_tokens_kernel(counts, slots, tokens):
    # counts (V,) int32 += each token's positions in tokens (N,) int32 (idx flattened);
    # slots (N,) = the count of position p's token before p's own: each token's slots are
    # 0 .. count - 1, in the order the threads came
    p = cuda.grid(1)
    if p < tokens.shape[0]:
        slots[p] = cuda.atomic.add(counts, tokens[p], 1)


@jit
def _token_starts_kernel(starts, counts):
    # starts (V,) int32 = the exclusive prefix sums of counts (V,): one block, each thread
    # a segment of the vocabulary (its sum, the block's scan of the sums, then the segment)
    V = counts.shape[0]
    t, threads = cuda.threadIdx.x, cuda.blockDim.x
    per = (V + threads - 1) // threads
    first, end = min(V, t * per), min(V, (t + 1) * per)
    total = int32(0)
    for v in range(first, end):
        total += counts[v]
    sums = cuda.shared.array(SCAN_THREADS, int32)
    sums[t] = total
    cuda.syncthreads()
    offset = 1
    while offset < threads:         # sums[t] = the sum of the first t + 1 segments
        earlier = sums[t - offset] if t >= offset else int32(0)
        cuda.syncthreads()
        sums[t] += earlier
        cuda.syncthreads()
        offset *= 2
    start = sums[t] - total
    for v in range(first, end):
        starts[v] = start
        start += counts[v]


@jit
def _bucket_positions_kernel(buckets, tokens, starts, slots):
    # buckets (N,) int32: position p at its token's start plus its slot, so each token's
    # positions fill its bucket of the sorted order, in the order of their slots
    p = cuda.grid(1)
    if p < tokens.shape[0]:
        buckets[starts[tokens[p]] + slots[p]] = p


@jit
def _sort_buckets_kernel(order, sorted_tokens, buckets, tokens, starts, counts):
    # order (N,) int32 = the positions sorted by (token, position): each position of a
    # bucket at its token's start plus the count of the bucket's positions before it;
    # sorted_tokens (N,) = their tokens
    i = cuda.grid(1)
    if i < buckets.shape[0]:
        p = buckets[i]
        token = tokens[p]
        first = starts[token]
        before = int32(0)
        for j in range(first, first + counts[token]):
            if buckets[j] < p:
                before += 1
        order[first + before] = p
        sorted_tokens[first + before] = token


@cuda.jit(device=True, inline=True)
def _segment_end(sorted_tokens, r, end):
    """The end of the segment of sorted positions from r: the first position at or after
    r, before end, whose token differs from r's (or end)."""
    token = sorted_tokens[r]
    r += 1
    while r < end and sorted_tokens[r] == token:
        r += 1
    return r


@cuda.jit(device=True, inline=True)
def _segment_sum(rows, order, first, end, c):
    """The sum of column c of rows (N, C), dout flattened, over the sorted positions
    [first, end), in order."""
    total = float32(0.0)
    for r in range(first, end):
        total += rows[order[r], c]
    return total


@jit
def _chunk_leads_kernel(leads, order, sorted_tokens, rows, chunk):
    # leads (chunks, C) = the sum of rows (N, C) over each chunk's leading segment of
    # order (N,) int32; a thread per (chunk, column)
    C = rows.shape[1]
    N = order.shape[0]
    i = cuda.grid(1)
    if i < leads.shape[0] * C:
        k, c = divmod(i, C)
        first = k * chunk
        end = _segment_end(sorted_tokens, first, min(N, first + chunk))
        leads[k, c] = _segment_sum(rows, order, first, end, c)


@jit
def _run_sums_kernel(dwte, leads, order, sorted_tokens, rows, chunk):
    # dwte (V, C) += the sum of rows (N, C) over each token's run of order (N,) int32,
    # added by the thread of (the chunk the run begins in, column), leads (chunks, C)
    # holding the parts in the chunks after
    C = rows.shape[1]
    N = order.shape[0]
    i = cuda.grid(1)
    if i < leads.shape[0] * C:
        k, c = divmod(i, C)
        first = k * chunk
        chunk_end = min(N, first + chunk)
        r = first
        while r < chunk_end:
            token = sorted_tokens[r]
            segment_end = _segment_end(sorted_tokens, r, chunk_end)
            if r > 0 and r == first and sorted_tokens[r - 1] == token:
                r = segment_end         # a run from an earlier chunk: its thread adds this
                continue
            total = _segment_sum(rows, order, r, segment_end, c)
            end, j = segment_end, k
            # the run goes on into chunk j + 1 while chunk j ends in it
            while end == min(N, (j + 1) * chunk) and end < N and sorted_tokens[end] == token:
                j += 1
                total += leads[j, c]
                end = _segment_end(sorted_tokens, end, min(N, (j + 1) * chunk))
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
    (_count_tokens_kernel, (int32[::1], int32[::1], int32[::1])),
    (_token_starts_kernel, (int32[::1], int32[::1])),
    (_bucket_positions_kernel, (int32[::1], int32[::1], int32[::1], int32[::1])),
    (_sort_buckets_kernel, (int32[::1], int32[::1], int32[::1], int32[::1], int32[::1],
                            int32[::1])),
    (_chunk_leads_kernel, (float32[:, ::1], int32[::1], int32[::1], float32[:, ::1], int64)),
    (_run_sums_kernel, (float32[:, ::1], float32[:, ::1], int32[::1], int32[::1],
                        float32[:, ::1], int64)),
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
    # flat views: a position p is row p of dout and element p of idx, no division by T
    tokens, rows = idx.reshape(N), dout.reshape(N, C)
    order, sorted_tokens, slots, buckets = (
        kept_with(dwte, ("encoder " + name, N), lambda: cuda.device_array(N, np.int32))
        for name in ("order", "sorted tokens", "slots", "buckets"))
    counts, starts = (kept_with(dwte, ("encoder " + name, V),
                                lambda: cuda.device_array(V, np.int32))
                      for name in ("counts", "starts"))
    leads = kept_with(dwte, ("encoder leads", chunks, C),
                      lambda: cuda.device_array((chunks, C), np.float32))
    fill_zero(counts, stream)
    positions = ceil_div(N, block)
    _count_tokens_kernel[positions, block, stream](counts, slots, tokens)
    _token_starts_kernel[1, SCAN_THREADS, stream](starts, counts)
    _bucket_positions_kernel[positions, block, stream](buckets, tokens, starts, slots)
    _sort_buckets_kernel[positions, block, stream](order, sorted_tokens, buckets, tokens,
                                                   starts, counts)
    _chunk_leads_kernel[ceil_div(chunks * C, block), block, stream](leads, order,
                                                                    sorted_tokens, rows, chunk)
    _run_sums_kernel[ceil_div(chunks * C, block), block, stream](dwte, leads, order,
                                                                 sorted_tokens, rows, chunk)
    _position_sums_kernel[ceil_div(T * C, block), block, stream](dwpe, dout)
