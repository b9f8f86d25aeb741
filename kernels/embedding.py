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
0. on the host, as the batch is copied in (``token_runs``): the N = B * T positions
   sorted by (token, position), NumPy's stable argsort, and each sorted position's end of
   its token's run. The host holds the tokens before the step, and a radix sort of 16-bit
   ids takes it ~0.1 ms, hidden behind the device's step; the device keeps only the sums.
   (Until session 24 three launches sorted on the device, 0.035 ms of andrea-120m's step:
   a block's segment of positions ranked in shared memory, the counts scanned into each
   token's start, each position placed.)
1. one launch, a thread per 4 columns (in 16-byte accesses, as the forward's) of: a
   position t and a part of PART_ROWS rows of the batch, whose sum goes to dwpe[t] (one
   part: the whole batch) or to the parts' scratch; or a chunk of CHUNK sorted positions,
   whose segments it sums: a run begun and ended in the chunk into dwte[token], the
   leading segment of a run begun before it to the chunk's head, the trailing one of a
   run going on after it to the chunk's tail. A thread loads all its rows before it
   adds them in order (the counts compile-time constants, the loads in flight together,
   where a thread walking a run waited out a load's latency a row);
2. a thread per 4 columns of: a position, dwpe[t] += its parts in order (where the batch
   took several); or a chunk whose tail's run goes on, dwte[token] += its tail + the
   heads of the chunks the run goes on into (its end known from the runs' ends), in
   order. Each element of dwte and dwpe is one thread's to write, the order of its sums
   fixed by the runs.
Consecutive threads take consecutive columns, so the reads of dout and the writes of
dwte are coalesced. The heads, tails and parts are scratch kept with dwte's memory
(common.kept_with). (Session 24's launches summed each run by a thread per (chunk of
32, column) walking it a row at a time, 0.059 ms of andrea-12m's step against the
atomics' 0.033: docs/convergence.md.)
"""
import functools

import numpy as np
from numba import cuda, float32, int32

from .cache import jit
from .common import ceil_div, check_array, check_block_size, kept_with
from .device import GROUP
from .precision import group_loader, group_storer, group_width

BLOCK = 256
CHUNK = 16          # sorted positions per thread of the chunk sums, loaded together
PART_ROWS = 16      # rows of the batch per thread of the position sums, loaded together
CARRY = 16          # parts or heads the second launch loads together


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
def _goes_on(ends, r):
    """Whether sorted position r's run began before it: the one before ends where it
    does (each run's positions hold its one end, and no two runs end alike)."""
    return r > 0 and ends[r - 1] == ends[r]


@functools.cache
def _sums_kernel(width, chunk, part_rows):
    """The backward's first launch, a thread per width columns (1, or GROUP in one 16-byte
    access of each array) of: a position and a part of part_rows rows of the batch (the
    position sums), or a chunk of `chunk` sorted positions (the chunk sums). Each thread
    loads all its rows before it adds them (the counts fixed at compile time, the loads
    unrolled and in flight together), then adds them in order."""
    load, store = group_loader(width), group_storer(width)
    held = max(chunk, part_rows) * width

    @jit
    def sums_kernel(dwte, dwpe, position_parts, heads, tails, dout, rows, order, ends,
                    tokens):
        # the first parts * T * groups threads, a thread per (part q, t, group): the sum
        # of dout (B, T, C) over rows q * part_rows on of the batch, added to dwpe
        # (context, C) where one part holds the batch, else written to position_parts
        # (parts, T, C); the next chunks * groups, a thread per (chunk k, group): the sums
        # of rows (N, C), dout flattened, over the chunk's segments of the sorted order (N,)
        # int32 (ends (N,): each sorted position's run's end; tokens (N,) the batch's ids,
        # by position): a run begun and ended in the chunk added to dwte (V, C), which no
        # other thread writes; the leading segment of a run begun before it written to
        # heads (chunks, C), the trailing one of a run going on after it to tails (chunks,
        # C) (the others are never read)
        B, T, C = dout.shape
        N = order.shape[0]
        groups = C // width
        parts = position_parts.shape[0]
        x = cuda.local.array(held, float32)
        total = cuda.local.array(width, float32)
        before = cuda.local.array(width, float32)
        for e in range(width):
            total[e] = float32(0.0)
        i = cuda.grid(1)
        if i < parts * T * groups:
            qt, g = divmod(i, groups)
            q, t = divmod(qt, T)
            c = g * width
            b0 = q * part_rows
            for j in range(part_rows):
                if b0 + j < B:
                    load(x, j * width, dout, (b0 + j, t, c))
            for j in range(part_rows):
                if b0 + j < B:
                    for e in range(width):
                        total[e] += x[j * width + e]
            if parts == 1:
                load(before, 0, dwpe, (t, c))
                for e in range(width):
                    total[e] += before[e]
                store(dwpe, (t, c), total, 0)
            else:
                store(position_parts, (q, t, c), total, 0)
        elif i < (parts * T + heads.shape[0]) * groups:
            k, g = divmod(i - parts * T * groups, groups)
            c = g * width
            first = k * chunk
            for j in range(chunk):
                if first + j < N:
                    load(x, j * width, rows, (order[first + j], c))
            leading = _goes_on(ends, first)     # the chunk begins in a run from before
            start = first                       # the segment's first sorted position
            for j in range(chunk):
                r = first + j
                if r < N:
                    for e in range(width):
                        total[e] += x[j * width + e]
                    end = ends[r]
                    if end == r + 1 or j == chunk - 1:      # the segment ends here
                        if leading and start == first:
                            store(heads, (k, c), total, 0)
                        elif end == r + 1:
                            token = tokens[order[r]]
                            load(before, 0, dwte, (token, c))
                            for e in range(width):
                                before[e] += total[e]
                            store(dwte, (token, c), before, 0)
                        else:
                            store(tails, (k, c), total, 0)
                        for e in range(width):
                            total[e] = float32(0.0)
                        start = r + 1
    return sums_kernel


@functools.cache
def _carries_kernel(width, chunk):
    """The backward's second launch, a thread per width columns (as _sums_kernel's) of a
    position, where the batch took several parts, or of a chunk. The parts, and the heads
    of the chunks a run goes on into, are loaded CARRY at a time before they are added."""
    load, store = group_loader(width), group_storer(width)
    carry, held = CARRY, CARRY * width

    @jit
    def carries_kernel(dwte, dwpe, position_parts, heads, tails, order, ends, tokens):
        # the first T * groups threads where there are several parts (else none): dwpe
        # (context, C) += position_parts (parts, T, C) summed in the parts' order; the
        # next chunks * groups, a thread per (chunk k, group): where a run begins in
        # chunk k and goes on past it, dwte[its token] += tails[k] + heads[k + 1] + ...
        # (chunks, C) in order, up to the chunk where it ends
        C = heads.shape[1]
        N = order.shape[0]
        groups = C // width
        parts, T = position_parts.shape[0], position_parts.shape[1]
        position_threads = T * groups if parts > 1 else 0
        x = cuda.local.array(held, float32)
        total = cuda.local.array(width, float32)
        before = cuda.local.array(width, float32)
        i = cuda.grid(1)
        if i < position_threads:
            t, g = divmod(i, groups)
            c = g * width
            load(total, 0, dwpe, (t, c))
            for q0 in range(0, parts, carry):
                for j in range(carry):
                    if q0 + j < parts:
                        load(x, j * width, position_parts, (q0 + j, t, c))
                for j in range(carry):
                    if q0 + j < parts:
                        for e in range(width):
                            total[e] += x[j * width + e]
            store(dwpe, (t, c), total, 0)
        elif i < position_threads + heads.shape[0] * groups:
            k, g = divmod(i - position_threads, groups)
            c = g * width
            first = k * chunk
            last = min(N, first + chunk) - 1
            end = ends[last]
            # the run of the chunk's last position goes on past it, and began in it
            if end > last + 1 and not (_goes_on(ends, first) and ends[first] == end):
                load(total, 0, tails, (k, c))
                stop = (end + chunk - 1) // chunk      # past the chunk the run ends in
                for j0 in range(k + 1, stop, carry):
                    for j in range(carry):
                        if j0 + j < stop:
                            load(x, j * width, heads, (j0 + j, c))
                    for j in range(carry):
                        if j0 + j < stop:
                            for e in range(width):
                                total[e] += x[j * width + e]
                token = tokens[order[last]]
                load(before, 0, dwte, (token, c))
                for e in range(width):
                    before[e] += total[e]
                store(dwte, (token, c), before, 0)
    return carries_kernel


PTX_SIGNATURES = [
    *[(_encoder_forward_kernel(width), (float32[:, :, ::1], int32[:, ::1], float32[:, ::1],
                                         float32[:, ::1])) for width in (1, GROUP)],
    (_encoder_backward_atomic_kernel, (float32[:, ::1], float32[:, ::1], float32[:, :, ::1],
                                        int32[:, ::1])),
    *[(_sums_kernel(width, CHUNK, PART_ROWS),
       (float32[:, ::1], float32[:, ::1], float32[:, :, ::1], float32[:, ::1], float32[:, ::1],
        float32[:, :, ::1], float32[:, ::1], int32[::1], int32[::1], int32[::1]))
      for width in (1, GROUP)],
    *[(_carries_kernel(width, CHUNK),
       (float32[:, ::1], float32[:, ::1], float32[:, :, ::1], float32[:, ::1], float32[:, ::1],
        int32[::1], int32[::1], int32[::1]))
      for width in (1, GROUP)],
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
                     block=BLOCK, chunk=CHUNK, part_rows=PART_ROWS):
    """dwte (V, C) += scatter-add of dout (B, T, C) by token; dwpe[:T] += dout summed over
    the batch. Both accumulate: zero them first for a plain gradient. deterministic: the
    same inputs give the same bits every time (no float atomics), from runs (2, B, T)
    int32, token_runs(idx) on the device (the default ignores it); chunk: sorted positions
    per thread of the chunk sums; part_rows: rows of the batch per thread of the position
    sums (compile-time constants, each value its own kernels)."""
    check_block_size(block)
    for name, value in (("chunk", chunk), ("part_rows", part_rows)):
        if value < 1:
            raise ValueError(f"{name} must be at least 1, got {value}")
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
    N, chunks, parts = B * T, ceil_div(B * T, chunk), ceil_div(B, part_rows)
    # flat views: a position p is row p of dout and element p of idx, no division by T
    tokens, rows = idx.reshape(N), dout.reshape(N, C)
    order, ends = runs[0].reshape(N), runs[1].reshape(N)
    scratch = {name: kept_with(dwte, ("encoder " + name, shape), lambda shape=shape:
                               cuda.device_array(shape, np.float32))
               for name, shape in (("heads", (chunks, C)), ("tails", (chunks, C)),
                                   ("position parts", (parts, T, C)))}
    heads, tails, position_parts = scratch["heads"], scratch["tails"], scratch["position parts"]
    width = group_width(C, dwte, dwpe, dout, heads, tails, position_parts)
    groups = C // width
    args = (dwte, dwpe, position_parts, heads, tails)
    _sums_kernel(width, chunk, part_rows)[ceil_div((parts * T + chunks) * groups, block),
                                          block, stream](*args, dout, rows, order, ends,
                                                         tokens)
    _carries_kernel(width, chunk)[ceil_div(((T if parts > 1 else 0) + chunks) * groups, block),
                                  block, stream](*args, order, ends, tokens)
