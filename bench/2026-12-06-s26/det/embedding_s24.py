"""Session 24's kernels/embedding.py (at 133dae7, imports made absolute), for the A/B of
the deterministic backward against main's in one process (embed_ab.py): bench only.

Token + position embedding, forward and backward (the "encoder", as llm.c calls it).

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
0. on the host, as the batch is copied in (``token_runs``): the N = B * T positions
   sorted by (token, position), NumPy's stable argsort, and each sorted position's end of
   its token's run. The host holds the tokens before the step, and a radix sort of 16-bit
   ids takes it ~0.1 ms, hidden behind the device's step; the device keeps only the sums.
   (Until session 24 three launches sorted on the device, 0.035 ms of andrea-120m's step:
   a block's segment of positions ranked in shared memory, the counts scanned into each
   token's start, each position placed.)
1. one launch: a thread per (t, column) sums the batch into dwpe[t, column], which it
   owns alone; and a thread per (chunk of CHUNK sorted positions, column) sums the
   chunk's leading segment where its token's run began in an earlier chunk;
2. a thread per (chunk, column) sums each run that begins in its chunk and adds the
   leading segments of the chunks the run goes on into (its end known from the runs'
   ends), in order, to dwte[token, column]: one thread owns each element of dwte.
Consecutive threads take consecutive columns, so the reads of dout and the writes of
dwte are coalesced. The chunks' sums are scratch kept with dwte's memory
(common.kept_with).
"""
import functools

import numpy as np
from numba import cuda, float32, int32, int64

from microgpt.kernels.cache import jit
from microgpt.kernels.common import ceil_div, check_array, check_block_size, kept_with
from microgpt.kernels.device import GROUP
from microgpt.kernels.precision import group_loader, group_storer, group_width

BLOCK = 256
CHUNK = 32          # sorted positions per thread of the run sums


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


@cuda.jit(device=True, inline=True)
def _segment_sum(rows, order, first, end, c):
    """The sum of column c of rows (N, C), dout flattened, over the sorted positions
    [first, end), in order."""
    total = float32(0.0)
    for r in range(first, end):
        total += rows[order[r], c]
    return total


@cuda.jit(device=True, inline=True)
def _goes_on(ends, r):
    """Whether sorted position r's run began before it: the one before ends where it
    does (each run's positions hold its one end, and no two runs end alike)."""
    return r > 0 and ends[r - 1] == ends[r]


@jit
def _position_sums_chunk_leads_kernel(dwpe, leads, dout, rows, order, ends, chunk):
    # the first T * C threads: dwpe (context, C) += dout (B, T, C) summed over the batch, a
    # thread per (t, c); the next chunks * C: leads (chunks, C) = the sum of rows (N, C),
    # dout flattened, over each chunk's leading segment of the sorted order (N,) int32
    # where a run from an earlier chunk goes on (the others are never read), a thread per
    # (chunk, column). One launch for both, which neither fills alone at andrea-12m; the
    # position sums, B rows each against a lead's chunk, first.
    B, T, C = dout.shape
    i = cuda.grid(1)
    if i < T * C:
        t, c = divmod(i, C)
        batch_sum = float32(0.0)
        for b in range(B):
            batch_sum += dout[b, t, c]
        dwpe[t, c] += batch_sum
    elif i < T * C + leads.shape[0] * C:
        k, c = divmod(i - T * C, C)
        first = k * chunk
        if _goes_on(ends, first):
            end = min(first + chunk, ends[first])
            leads[k, c] = _segment_sum(rows, order, first, end, c)


@jit
def _run_sums_kernel(dwte, leads, rows, order, ends, tokens, chunk):
    # dwte (V, C) += the sum of rows (N, C) over each token's run of the sorted order (N,)
    # int32 (ends (N,): each sorted position's run's end), added by the thread of (the
    # chunk the run begins in, column): its segment there, then the leads (chunks, C) of
    # the chunks it goes on into, in order; tokens (N,) the batch's, by position
    C = rows.shape[1]
    N = order.shape[0]
    i = cuda.grid(1)
    if i < leads.shape[0] * C:
        k, c = divmod(i, C)
        first = k * chunk
        chunk_end = min(N, first + chunk)
        r = first
        if _goes_on(ends, first):       # a run from an earlier chunk: its thread adds this
            r = min(chunk_end, ends[first])
        while r < chunk_end:
            run_end = ends[r]
            segment_end = min(chunk_end, run_end)
            total = _segment_sum(rows, order, r, segment_end, c)
            for j in range(k + 1, (run_end + chunk - 1) // chunk):
                total += leads[j, c]
            dwte[tokens[order[r]], c] += total
            r = segment_end


PTX_SIGNATURES = [
    *[(_encoder_forward_kernel(width), (float32[:, :, ::1], int32[:, ::1], float32[:, ::1],
                                         float32[:, ::1])) for width in (1, GROUP)],
    (_encoder_backward_atomic_kernel, (float32[:, ::1], float32[:, ::1], float32[:, :, ::1],
                                        int32[:, ::1])),
    (_position_sums_chunk_leads_kernel, (float32[:, ::1], float32[:, ::1], float32[:, :, ::1],
                                         float32[:, ::1], int32[::1], int32[::1], int64)),
    (_run_sums_kernel, (float32[:, ::1], float32[:, ::1], float32[:, ::1], int32[::1],
                        int32[::1], int32[::1], int64)),
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


def token_runs(idx):
    """idx (B, T) host int token ids (non-negative) -> (2, B, T) int32, flat: the positions
    sorted by (token, position) (NumPy's stable argsort of the flat ids), and for each
    sorted position the end (exclusive) of its token's run there: what the deterministic
    encoder_backward walks. Ids below 2 ** 16 (vocabularies up to 65,536) sort as 16-bit
    keys, which NumPy sorts stably by radix: ~0.1 ms for 16,384 tokens against ~1 ms for
    int32's merge sort."""
    flat = np.asarray(idx).reshape(-1)
    runs = np.empty((2, flat.size), np.int32)
    if flat.size:
        keys = flat.astype(np.uint16) if flat.max() < 1 << 16 else flat
        order = runs[0]
        order[:] = np.argsort(keys, kind="stable")
        ids = flat[order]
        ends = np.append(np.flatnonzero(ids[1:] != ids[:-1]) + 1, flat.size)
        runs[1] = np.repeat(ends, np.diff(ends, prepend=0))
    return runs.reshape(2, *np.shape(idx))


def encoder_backward(dwte, dwpe, dout, idx, runs=None, *, deterministic=False, stream=0,
                     block=BLOCK, chunk=CHUNK):
    """dwte (V, C) += scatter-add of dout (B, T, C) by token; dwpe[:T] += dout summed over
    the batch. Both accumulate: zero them first for a plain gradient. deterministic: the
    same inputs give the same bits every time (no float atomics), from runs (2, B, T)
    int32, token_runs(idx) on the device (the default ignores it); chunk: sorted positions
    per thread of the run sums."""
    check_block_size(block)
    if chunk < 1:
        raise ValueError(f"chunk must be at least 1, got {chunk}")
    B, T, C = _check_shapes("dout", dout, idx, dwte, dwpe, "dwte", "dwpe")
    if deterministic:
        if runs is None:
            raise ValueError("the deterministic backward sums in the batch's sorted order: "
                             "pass runs, token_runs(idx) on the device")
        check_array("runs", runs, (2, B, T), np.int32)
    if dout.size == 0:
        return
    if not deterministic:
        _encoder_backward_atomic_kernel[ceil_div(T * C, block), block, stream](dwte, dwpe,
                                                                               dout, idx)
        return
    N, chunks = B * T, ceil_div(B * T, chunk)
    # flat views: a position p is row p of dout and element p of idx, no division by T
    tokens, rows = idx.reshape(N), dout.reshape(N, C)
    order, ends = runs[0].reshape(N), runs[1].reshape(N)
    leads = kept_with(dwte, ("encoder leads", chunks, C),
                      lambda: cuda.device_array((chunks, C), np.float32))
    _position_sums_chunk_leads_kernel[ceil_div((T + chunks) * C, block), block, stream](
        dwpe, leads, dout, rows, order, ends, chunk)
    _run_sums_kernel[ceil_div(chunks * C, block), block, stream](dwte, leads, rows, order,
                                                                  ends, tokens, chunk)
