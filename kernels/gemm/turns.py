"""Ordered split-K (the "ordered" epilogue): the same bits every run.

Split-K's "atomic" epilogue adds each split's float32 part into out as its block finishes,
so the order of the additions, and by rounding the sum, varies from run to run. Here the
splits of a unit of out (a tile, or a warpgroup's rows of one) add their parts one after
another in the order of their index, ((out + part 0) + part 1) + ...: a turn counter per
unit (an int32, exact in any order) says whose turn it is; a block waits for its turn,
adds its part, waits until the add has landed, and passes the turn on; the last split
passes it back to 0, ready for the next launch and for a graph's replay.

A block waits only on splits of lower index, which are launched before it (blocks start in
the order of their linear index, and both kernels put the splits along z, the slowest), so
they have started or finished and none waits on it: no deadlock. So split z of every tile
comes before split z + 1 of any: where a launch takes several waves of blocks, the turn
of a split has mostly come by the time it ends. The adds move no more
data than the atomic epilogue's; what they cost is the wait, when a tile's splits finish
together and add one after another.

The persistent kernel can instead write each split's part into rows of its own of a
float32 workspace (its "parts" epilogue: no waits), and add_parts then adds them into out
in the same order, out + part 0 + part 1 + ... left to right: the same bits as the turns',
for twice the traffic of out's size a split through the L2 and one more launch (a thread
per 4 columns of a row, every part's load in flight at once).

That launch runs beside the stream of the product (``beside``: on a second stream forked
from it after the product, by events, which a CUDA graph's capture keeps as edges), so
that it overlaps the launches after the product instead of holding them up: nothing on
the stream reads a weight gradient until the update, and ``join`` makes the stream wait
for it where something may, before the next ordered product (which writes the
workspace, or adds into the same out) and before any of the backend's ops that read or
write a gradient (``microgpt.cuda_backend.BESIDE_ADD_PARTS`` names the ops that need not
wait). The same launches in the same order into the same memory: the same bits.
"""
import functools

import numpy as np
from numba import cuda, float32, int32

from ..cache import jit
from ..common import ceil_div, kept_with
from ..device import GROUP, SIMULATOR
from ..precision import group_loader, group_storer, group_width


def split_turns(out, units):
    """The turn counters of a launch over `units` units of out, zeros, kept with out's
    allocation (a captured launch holds their address); a launch without ordered splits
    passes those of one unit, unread. The launches on one stream run one at a time and
    leave them at 0, so the GEMMs into one allocation share them."""
    return kept_with(out, ("split turns", units),
                     lambda: cuda.to_device(np.zeros(units, np.int32)))


@cuda.jit(device=True, inline=True)
def wait_turn(turns, unit, split):
    """Until split `split` has the turn of `unit`; then what the splits before it wrote
    is visible to this thread (the fence after a read of the counter that saw their
    release: an acquire). The counter is read by a compare-and-swap that writes only the
    value it found: the simulator's atomics take a lock each, so its add of 0 (a read and
    a write) beside another thread's exchange could write back the value the exchange
    replaced (a persistent block's ping-pong warpgroups wait on each other's turns)."""
    while cuda.atomic.cas(turns, unit, split, split) != split:
        pass
    cuda.threadfence()


@cuda.jit(device=True, inline=True)
def pass_turn(turns, unit, split, splits):
    """The turn of `unit` to the next split (the last gives it back to 0), after what
    this block wrote (the fence before: a release)."""
    cuda.threadfence()
    cuda.atomic.exch(turns, unit, int32(split + 1 if split + 1 < splits else 0))


@functools.cache
def block_turns(ordered):
    """(take, give), which every thread of a block calls around its adds into a unit of
    out: until its split's turn (the split blockIdx.z), and the turn passed on after
    every thread's adds; nothing unless ordered."""
    @cuda.jit(device=True, inline=True)
    def take(turns, unit):
        if ordered:
            if cuda.threadIdx.x == 0:
                wait_turn(turns, unit, cuda.blockIdx.z)
            cuda.syncthreads()

    @cuda.jit(device=True, inline=True)
    def give(turns, unit):
        if ordered:
            cuda.threadfence()          # every thread's adds, before the turn passes
            cuda.syncthreads()
            if cuda.threadIdx.x == 0:
                pass_turn(turns, unit, cuda.blockIdx.z, cuda.gridDim.z)
    return take, give


ADD_BLOCK = 256     # threads of add_parts' blocks


@functools.cache
def _add_parts_kernel(width, splits):
    """out += the parts, a thread per width columns of a row of out (GROUP of them in one
    16-byte access of each array, or 1), its splits' parts all loaded before it adds them:
    splits fixed at compile time, the loads unrolled and in flight together. (Session 22's
    kernel, a thread a column and the splits a loop, waited out one load's latency a
    split: ~0.009 ms of a by-parts dW at andrea-12m over the atomics', 26 of them a
    step.)"""
    load, store = group_loader(width), group_storer(width)
    held = (splits + 1) * width         # out's elements and the parts' (a constant size)

    @jit
    def add_parts_kernel(out, parts, rows):
        # out (M, N) float32 +=, parts (splits * rows, N) float32: part z rows z * rows on
        M, N = out.shape
        groups = N // width
        i = cuda.grid(1)
        if i < M * groups:
            r, g = divmod(i, groups)
            c = g * width
            x = cuda.local.array(held, float32)
            load(x, 0, out, (r, c))
            for z in range(splits):
                load(x, (z + 1) * width, parts, (z * rows + r, c))
            for e in range(width):
                total = x[e]
                for z in range(splits):     # in the splits' order: the turns' sums
                    total += x[(z + 1) * width + e]
                x[e] = total
            store(out, (r, c), x, 0)
    return add_parts_kernel


def add_parts(out, parts, splits, stream=0):
    """out (M, N) float32 += parts' splits parts, ((out + part 0) + part 1) + ..., part z
    rows z * R to z * R + M of parts (splits * R, N) float32 (the persistent kernel's
    "parts" epilogue; R >= M, a whole number of its tiles)."""
    M, N = out.shape
    rows = parts.shape[0] // splits
    if parts.shape[1] != N or rows < M or rows * splits != parts.shape[0]:
        raise ValueError(f"parts: expected {splits} parts of at least {M} rows x {N}, "
                         f"got shape {tuple(parts.shape)}")
    if M and N:
        width = group_width(N, out, parts)
        _add_parts_kernel(width, splits)[ceil_div(M * (N // width), ADD_BLOCK), ADD_BLOCK,
                                         stream](out, parts, np.int32(rows))


BESIDE = not SIMULATOR     # add_parts beside the product's stream (False: on it, in turn)


class _Side:
    """A launch stream's second stream, the events that fork work onto it and join it
    back, and whether work enqueued there since the last join is still to be joined."""

    def __init__(self, stream):
        self.of = stream            # (held: its handle stays this stream's)
        self.stream = cuda.stream()
        self.forked = cuda.event(timing=False)
        self.done = cuda.event(timing=False)
        self.pending = False


_sides = {}         # a launch stream's handle -> its _Side


def beside(enqueue, stream):
    """enqueue(side) enqueues work on side, a second stream that starts after what stream
    holds so far; stream itself goes on at once (join makes it wait for the work). On the
    legacy default stream (0), or with BESIDE off, enqueue(stream) instead."""
    if not BESIDE or not stream:
        enqueue(stream)
        return
    key = int(stream.handle)
    side = _sides.get(key)
    if side is None or side.of is not stream:
        side = _sides[key] = _Side(stream)
    side.forked.record(stream)
    side.forked.wait(side.stream)
    enqueue(side.stream)
    side.done.record(side.stream)
    side.pending = True


def join(stream):
    """stream waits for the work enqueued beside it (beside) since the last join; nothing
    where there is none. A captured sequence ends joined, so that its graph holds every
    branch (the update joins: it reads the gradients)."""
    if not _sides or not stream:        # (nothing was ever put beside a stream)
        return
    side = _sides.get(int(stream.handle))
    if side is not None and side.of is stream and side.pending:
        side.done.wait(stream)
        side.pending = False


# the splits of the ordered products by parts (tuning.ordered_tile) at andrea-12m (16, 7,
# 5, 2) and an odd one, in groups and element by element
PTX_SIGNATURES = [(_add_parts_kernel(width, splits),
                   (float32[:, ::1], float32[:, ::1], int32))
                  for width in (GROUP, 1) for splits in (2, 5, 7, 16)]
