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
for twice the traffic of out's size a split through the L2 and one more launch.
"""
import functools

import numpy as np
from numba import cuda, int32, types

from ..cache import jit
from ..common import ceil_div, kept_with


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


ADD_BLOCK = 128     # threads of add_parts' blocks: one a column, a block a row of out
MAX_GRID_Y = 65535  # blocks down a grid's y (rows past it: the next lap of the loop)


@jit
def _add_parts_kernel(out, parts, splits, rows):
    M, N = out.shape
    c = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
    if c < N:
        for r in range(cuda.blockIdx.y, M, cuda.gridDim.y):
            total = out[r, c]
            for z in range(splits):         # in the splits' order: the turns' sums
                total += parts[z * rows + r, c]
            out[r, c] = total


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
        _add_parts_kernel[(ceil_div(N, ADD_BLOCK), min(M, MAX_GRID_Y)), ADD_BLOCK, stream](
            out, parts, np.int32(splits), np.int32(rows))


PTX_SIGNATURES = [(_add_parts_kernel, (types.float32[:, ::1], types.float32[:, ::1],
                                       types.int32, types.int32))]
