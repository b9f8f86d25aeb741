"""The TMA + mbarrier pipeline: slabs brought into `stages` shared buffers by the bulk
tensor copies, one producer thread issuing them stages - 1 steps ahead, consumer
warpgroups waiting for them and releasing them (the protocol CUTLASS calls
PipelineTmaAsync).

Two mbarriers a stage, in the block's barrier array: `full` (stage s, one arrival: the
producer's expect_tx, then the copies' bytes complete its phase) and `empty` (stages + s,
one arrival per consumer). A barrier's phases alternate parity 0, 1, 0, ...: step n uses
stage n % stages for the (n // stages)-th time, so it waits on `full` for the phase of
parity (n // stages) % 2, and the producer, before filling that stage for step n again,
waits on `empty` for the phase that the consumers completed when they released step
n - stages: parity (n // stages + 1) % 2.

    pipe = tma_pipeline(stages, consumers, fill)
    if thread 0: pipe.init(bars); fence_barrier_init()      (then a block barrier)
    if thread 0: pipe.prologue(bars, steps, operands)
    for step in range(steps):
        pipe.wait(bars, step)
        ... the arithmetic on stage step % stages ...
        when done with step - 1, one thread a consumer: pipe.release(bars, step - 1)
        pipe.refill(bars, step, steps, operands, thread == 0)

A producer that is also a consumer (the persistent GEMM's thread 0) may take refill_ready
instead of refill: it waits for the other consumers only for a slab it needs itself.

fill(bars, stage, step, operands) announces the slab's bytes on `full` (expect_tx) and
issues its copies, completing on it; operands is a tuple the kernel packs. Used by the
wgmma GEMMs (``gemm.wgmma``, ``gemm.persistent``).

In a cluster of blocks whose producers each copy part of a slab into every block's
stage (the bulk copy's multicast), a stage is free again once the consumers of every
block of the cluster are done with it: `empty` then counts consumers x cluster arrivals,
and each consumer releases a step in every block of the cluster.
"""
from typing import NamedTuple

from numba import cuda

from ..atoms import mbarrier_arrive, mbarrier_arrive_cluster, mbarrier_init, mbarrier_try_wait


class TmaPipeline(NamedTuple):
    """The device functions of one pipeline (see the module's docstring) and the number of
    mbarriers it takes from the front of the block's barrier array."""
    barriers: int
    init: object
    prologue: object
    wait: object
    release: object
    refill: object
    refill_ready: object


def tma_pipeline(stages, consumers, fill, cluster=1):
    """The pipeline of `stages` buffers (at least 2) that fill(bars, stage, step, operands)
    fills, released by `consumers` arrivals (of each block of a cluster of `cluster`)."""
    if stages < 2:
        raise ValueError(f"a pipeline of {stages} stages: it needs at least 2")

    @cuda.jit(device=True, inline=True)
    def init(bars):
        """The barriers' counts (one thread, before any other uses them)."""
        for s in range(stages):
            mbarrier_init(bars, s, 1)
            mbarrier_init(bars, stages + s, consumers * cluster)

    @cuda.jit(device=True, inline=True)
    def prologue(bars, steps, operands):
        """The producer's copies of steps 0 .. stages - 2 (those there are)."""
        for ahead in range(min(stages - 1, steps)):
            fill(bars, ahead, ahead, operands)

    @cuda.jit(device=True, inline=True)
    def wait(bars, step):
        """Until the slab of `step` has landed."""
        while not mbarrier_try_wait(bars, step % stages, step // stages % 2):
            pass

    @cuda.jit(device=True, inline=True)
    def release(bars, step):
        """One consumer is done reading the slab of `step`."""
        if cluster == 1:
            mbarrier_arrive(bars, stages + step % stages, 1)
        else:
            for rank in range(cluster):
                mbarrier_arrive_cluster(bars, stages + step % stages, rank)

    @cuda.jit(device=True, inline=True)
    def refill(bars, step, steps, operands, producer):
        """The copies of step + stages - 1, into the stage that step - 1 read, once every
        consumer has released it; by the thread for which `producer` holds (one: the
        others pass by)."""
        ahead = step + stages - 1
        if producer and ahead < steps:
            stage = ahead % stages
            while not mbarrier_try_wait(bars, stages + stage, (ahead // stages + 1) % 2):
                pass
            fill(bars, stage, ahead, operands)

    @cuda.jit(device=True, inline=True)
    def refill_ready(bars, needed, ahead, issued, steps, operands):
        """A producer thread's copies that are also a consumer's: of the steps from
        `issued` (those copied so far) on, every one before `needed` (waiting for its
        stage's release: this consumer cannot go on without it), then those before
        `ahead` whose stages are released already, stopping at the first that is not;
        returns the new count. So the producer waits for the other consumers only when it
        must: its own warpgroup's MMAs would wait with it (refill waits at every step)."""
        while issued < min(ahead, steps):
            stage = issued % stages
            if issued >= stages:
                parity = (issued // stages + 1) % 2
                if issued < needed:
                    while not mbarrier_try_wait(bars, stages + stage, parity):
                        pass
                elif not mbarrier_try_wait(bars, stages + stage, parity):
                    break
            fill(bars, stage, issued, operands)
            issued += 1
        return issued

    return TmaPipeline(2 * stages, init, prologue, wait, release, refill, refill_ready)
