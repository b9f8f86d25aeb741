"""The multistage cp.async pipeline: the copies of a step's tiles issued `stages` - 1 steps
before the step reads them, into one of `stages` shared buffers, so that the copies of the
steps ahead overlap the arithmetic of this one.

One commit group per step, in step order: the prologue issues the first stages - 1, each
step then waits until at most stages - 2 groups are still in flight (its own has landed,
for this thread), a barrier makes everyone's copies visible and frees the buffer the
previous step read, and the step refills that buffer with the copies stages - 1 steps
ahead (an empty group past the last step keeps the count uniform):

    pipe = multistage(stages, fill)
    pipe.prologue(steps, operands)
    for step in range(steps):
        pipe.wait()
        pipe.refill(step, steps, operands)
        ... the arithmetic on buffer step % stages ...

Every walk has a step (the launchers see to it): step 0 is filled without asking, as a
test of steps before it cost flash attention's dq pass 40 instructions a step in its
loop (docs/flash-attention.md, tuning log v9).

fill(stage, step, operands) issues the cp.async copies of `step` into buffer `stage`;
operands is a tuple the kernel packs (the shared and global arrays, offsets, pitches)
and fill unpacks: numba inlines both, so the tuple costs nothing. A kernel may copy tiles
of its own (the rows it keeps for every step) before the prologue: they land with step 0.
Used by the mma.sync GEMM (``gemm.mma_sync``) and the three passes of flash attention
(``attention.flash``).
"""
from typing import NamedTuple

from numba import cuda

from ..atoms import cp_async_commit, cp_async_wait_group


class Multistage(NamedTuple):
    """The device functions of one pipeline: prologue(steps, operands), wait(),
    refill(step, steps, operands)."""
    prologue: object
    wait: object
    refill: object


def multistage(stages, fill):
    """The pipeline of `stages` buffers (at least 2) that fill(stage, step, operands) fills."""
    if stages < 2:
        raise ValueError(f"a pipeline of {stages} stages: it needs at least 2")
    wait_group = cp_async_wait_group(stages - 2)

    @cuda.jit(device=True, inline=True)
    def prologue(steps, operands):
        """The copies of steps 0 .. stages - 2 (those there are: step 0 always), a commit
        group each."""
        fill(0, 0, operands)
        cp_async_commit()
        for s in range(1, stages - 1):
            if s < steps:
                fill(s, s, operands)
            cp_async_commit()

    @cuda.jit(device=True, inline=True)
    def wait():
        """This step's copies have landed, everyone's, and the previous step's buffer is
        read: every thread of the block calls it."""
        wait_group()
        cuda.syncthreads()

    @cuda.jit(device=True, inline=True)
    def refill(step, steps, operands):
        """The copies of step + stages - 1 into the buffer the previous step read."""
        ahead = step + stages - 1
        if ahead < steps:
            fill(ahead % stages, ahead, operands)
        cp_async_commit()

    return Multistage(prologue, wait, refill)
