"""The pipelines (kernels/pipelines/) on their own: every step of a walk reads its own data
from the buffer the pipeline filled for it, whatever the number of stages and steps
(fewer steps than stages, and enough for each stage to be refilled several times: the
mbarriers' phases turn over). A refill into the buffer a step is still reading, or a
wait on the wrong phase, gives a step another step's rows (or, on the GPU, hangs: the
tests run under a timeout there). The same tests run in the simulator (CI) and on the
GPU (the GPU profile), where the copies are truly asynchronous."""
import functools

import numpy as np
import pytest
from helpers import compiles_for_sm90, poisoned
from hypothesis import given
from hypothesis import strategies as st
from numba import cuda, float32, int32, int64, uint16, uint32, uint64

from microgpt.kernels.atoms import (cp_async_16, fence_barrier_init, fence_tensor_map,
                                    mbarrier_arrive_expect_tx, named_barrier, shared_address,
                                    tma_load_2d)
from microgpt.kernels.device import SHARED_ALIGN
from microgpt.kernels.layouts.tensor_maps import tensor_map
from microgpt.kernels.layouts.tiles import swizzled
from microgpt.kernels.pipelines.multistage import multistage
from microgpt.kernels.pipelines.tma import tma_pipeline

SEEDS = st.integers(0, 2**32 - 1)
WIDTH = 32          # float32 a row, one row a step; 8 threads copy 4 each (16 bytes)
THREADS = 8


@functools.cache
def multistage_kernel(stages):
    @cuda.jit(device=True, inline=True)
    def fill(stage, step, operands):
        smem, src = operands
        at = 4 * cuda.threadIdx.x
        cp_async_16(smem, int32(stage * WIDTH + at), src, int64(step * WIDTH + at),
                    uint32(16))

    pipe = multistage(stages, fill)
    size = stages * WIDTH       # a closure's int: the shared array's size is a constant

    @cuda.jit
    def kernel(out, src):
        # out, src (steps, WIDTH) float32: each step copies its row of src in, and each
        # thread writes out the quarter of it that the next thread copied
        smem = cuda.shared.array(size, float32, alignment=SHARED_ALIGN)
        steps = src.shape[0]
        operands = (smem, src)
        pipe.prologue(steps, operands)
        for step in range(steps):
            pipe.wait()
            pipe.refill(step, steps, operands)
            theirs = 4 * ((cuda.threadIdx.x + 1) % THREADS)
            for e in range(4):
                out[step, theirs + e] = smem[step % stages * WIDTH + theirs + e]
    return kernel


@given(seed=SEEDS)
@pytest.mark.parametrize("stages, steps", [(2, 1), (2, 5), (3, 1), (3, 2), (3, 7), (4, 9)])
def test_the_multistage_pipeline_gives_each_step_its_own_rows(seed, stages, steps):
    src = np.random.default_rng(seed).standard_normal((steps, WIDTH)).astype(np.float32)
    out = cuda.to_device(poisoned((steps, WIDTH)))
    multistage_kernel(stages)[1, THREADS](out, cuda.to_device(src))
    np.testing.assert_array_equal(out.copy_to_host(), src)


BOX_ROWS, BOX_COLS = 32, 16     # bf16 bits: 32-byte rows, a stage of 1024 bytes
CONSUMERS = 2                   # warps, each releasing the stage it has read
STAGE = BOX_ROWS * BOX_COLS


@functools.cache
def tma_kernel(stages):
    @cuda.jit(device=True, inline=True)
    def fill(bars, stage, step, operands):
        smem, src, src_map = operands
        mbarrier_arrive_expect_tx(bars, stage, 2 * STAGE)
        tma_load_2d(smem, int32(stage * STAGE), src, src_map, 0, step * BOX_ROWS, bars,
                    stage)

    pipe = tma_pipeline(stages, CONSUMERS, fill)
    index = swizzled(BOX_COLS)      # where the copy engine lays a box's element
    barriers = pipe.barriers        # a closure's int: the shared array's size is a constant

    @cuda.jit
    def kernel(out, src, src_map):
        # out, src (steps * BOX_ROWS, BOX_COLS) uint16: a box of src rows a step, copied
        # in by thread 0 and read out by every thread, each its share of the box
        bars = cuda.shared.array(barriers, uint64)
        raw = cuda.shared.array(0, uint16)
        smem = raw[int32((1024 - shared_address(raw, 0) % 1024) % 1024 // 2):]
        steps = src.shape[0] // BOX_ROWS
        operands = (smem, src, src_map)
        if cuda.threadIdx.x == 0:
            pipe.init(bars)
            fence_barrier_init()
        cuda.syncthreads()
        if cuda.threadIdx.x == 0:
            fence_tensor_map(src_map)
            pipe.prologue(bars, steps, operands)
        for step in range(steps):
            pipe.wait(bars, step)
            for e in range(cuda.threadIdx.x, STAGE, 32 * CONSUMERS):
                r, c = e // BOX_COLS, e % BOX_COLS
                out[step * BOX_ROWS + r, c] = smem[step % stages * STAGE + index(r, c)]
            named_barrier(1 + cuda.threadIdx.x // 32, 32)     # this warp has read it
            if cuda.threadIdx.x % 32 == 0:
                pipe.release(bars, step)
            pipe.refill(bars, step, steps, operands, cuda.threadIdx.x == 0)
    return kernel


@given(seed=SEEDS)
@pytest.mark.parametrize("stages, steps", [(2, 1), (2, 5), (3, 2), (3, 7), (4, 9)])
def test_the_tma_pipeline_gives_each_step_its_own_box(seed, stages, steps):
    rng = np.random.default_rng(seed)
    # (not 0xFFFF, the poison)
    src = rng.integers(0, 2**16 - 1, (steps * BOX_ROWS, BOX_COLS)).astype(np.uint16)
    out = cuda.to_device(poisoned(src.shape, np.uint16))
    src_dev = cuda.to_device(src)
    tma_kernel(stages)[1, 32 * CONSUMERS, 0, 2 * stages * STAGE + 1024](
        out, src_dev, tensor_map(src_dev, BOX_ROWS, BOX_COLS))
    np.testing.assert_array_equal(out.copy_to_host(), src)


def test_a_pipeline_needs_two_stages():
    for make in (multistage, tma_pipeline):
        args = (1, None) if make is multistage else (1, 1, None)
        with pytest.raises(ValueError, match="at least 2"):
            make(*args)


def test_the_test_kernels_compile_for_sm90():
    compiles_for_sm90("test_kernels_pipelines", """
cuda.compile_ptx(t.multistage_kernel(3).py_func, (float32[:, ::1], float32[:, ::1]), cc=(9, 0))
cuda.compile_ptx(t.tma_kernel(3).py_func, (uint16[:, ::1], uint16[:, ::1], uint64[::1]),
                 cc=(9, 0))
""")
