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
"""
import functools

import numpy as np
from numba import cuda, int32

from ..common import kept_with


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
