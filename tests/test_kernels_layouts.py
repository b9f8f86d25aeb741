"""The named fragment maps (kernels/layouts/fragments.py) against the instructions: the
accumulators of an mma and of a wgmma, written out at the coordinates the maps give, are
the product NumPy computes. The same tests run the simulator twins (CI) and the PTX
instructions (the GPU profile)."""
import functools

import ml_dtypes
import numpy as np
from helpers import assert_close, compiles_for_sm90, poisoned
from hypothesis import given
from hypothesis import strategies as st
from numba import cuda, float32, int32, uint16, uint64

from microgpt.kernels.atoms import (fence_proxy_async, mma_bf16_16816, shared_address,
                                    warpgroup_commit, warpgroup_fence, warpgroup_wait,
                                    wgmma_bf16)
from microgpt.kernels.layouts.fragments import (accumulator_col, accumulator_row,
                                                wgmma_accumulator_row)
from microgpt.kernels.layouts.tiles import paneled, wgmma_operand

SEEDS = st.integers(0, 2**32 - 1)


def bf16_bits(rng, *shape):
    x = rng.standard_normal(shape).astype(np.float32).astype(ml_dtypes.bfloat16)
    return x.view(np.uint16), x.astype(np.float64)


@cuda.jit
def mma_map_kernel(d, a_regs, b_regs):
    # d (16, 8) float32; a_regs (32, 4), b_regs (32, 2): each lane's fragments, packed on
    # the host from the documented operand layout; one warp. The result goes out where
    # the maps say each accumulator lies.
    lane = cuda.threadIdx.x
    c = mma_bf16_16816(a_regs[lane, 0], a_regs[lane, 1], a_regs[lane, 2], a_regs[lane, 3],
                       b_regs[lane, 0], b_regs[lane, 1], float32(0.0), float32(0.0),
                       float32(0.0), float32(0.0))
    row, col = accumulator_row(lane), accumulator_col(lane)
    d[row, col], d[row, col + 1] = c[0], c[1]
    d[row + 8, col], d[row + 8, col + 1] = c[2], c[3]


def pack(lo, hi):
    return np.uint32(int(lo) | int(hi) << 16)


@given(seed=SEEDS)
def test_the_mma_accumulator_map_places_the_product(seed):
    rng = np.random.default_rng(seed)
    a, a64 = bf16_bits(rng, 16, 16)
    b, b64 = bf16_bits(rng, 16, 8)
    a_regs, b_regs = np.zeros((32, 4), np.uint32), np.zeros((32, 2), np.uint32)
    for lane in range(32):      # the A and B fragments of the PTX ISA's figures
        g, t = lane // 4, lane % 4
        for r, (row, col) in enumerate(((g, 0), (g + 8, 0), (g, 8), (g + 8, 8))):
            a_regs[lane, r] = pack(a[row, col + 2 * t], a[row, col + 2 * t + 1])
        for r in range(2):
            b_regs[lane, r] = pack(b[8 * r + 2 * t, g], b[8 * r + 2 * t + 1, g])
    d = cuda.to_device(poisoned((16, 8)))
    mma_map_kernel[1, 32](d, cuda.to_device(a_regs), cuda.to_device(b_regs))
    assert_close(d.copy_to_host(), a64 @ b64, 1e-6, "mma accumulators by the maps")


N = 32      # the wgmma's n


@functools.cache
def wgmma_map_kernel():
    regs = N // 2
    mma = wgmma_bf16(N, False, True)        # A [m][k], B [k][n]: both as layouts.tiles lays them
    a_index, b_index = paneled(64, 16), paneled(16, N)
    a_fields, _ = wgmma_operand(64, 16, k_is_row=False)
    b_fields, _ = wgmma_operand(16, N, k_is_row=True)
    a_elements = 64 * 16
    fence, wait = warpgroup_fence(regs), warpgroup_wait(0, regs)

    @cuda.jit
    def kernel(d, a, b):
        # d (64, N) float32; a (64, 16), b (16, N) bf16 bits; one warpgroup
        raw = cuda.shared.array(0, uint16)
        smem = raw[int32((1024 - shared_address(raw, 0) % 1024) % 1024 // 2):]
        for e in range(cuda.threadIdx.x, 64 * 16, 128):
            smem[a_index(e // 16, e % 16)] = a[e // 16, e % 16]
        for e in range(cuda.threadIdx.x, 16 * N, 128):
            smem[a_elements + b_index(e // N, e % N)] = b[e // N, e % N]
        fence_proxy_async()
        cuda.syncthreads()
        acc = cuda.local.array(regs, float32)
        for r in range(regs):
            acc[r] = float32(0.0)
        desc_a = uint64(shared_address(smem, 0) >> 4 & 0x3FFF) | a_fields
        desc_b = uint64(shared_address(smem, int32(a_elements)) >> 4 & 0x3FFF) | b_fields
        fence(acc)
        mma(smem, desc_a, desc_b, acc)
        warpgroup_commit()
        wait(acc)
        thread = cuda.threadIdx.x
        row, col = wgmma_accumulator_row(thread), accumulator_col(thread)
        for j in range(N // 8):
            for h in range(2):
                for e in range(2):
                    d[row + 8 * h, 8 * j + col + e] = acc[4 * j + 2 * h + e]
    return kernel


@given(seed=SEEDS)
def test_the_wgmma_accumulator_map_places_the_product(seed):
    rng = np.random.default_rng(seed)
    a, a64 = bf16_bits(rng, 64, 16)
    b, b64 = bf16_bits(rng, 16, N)
    d = cuda.to_device(poisoned((64, N)))
    wgmma_map_kernel()[1, 128, 0, 2 * (64 * 16 + 16 * N) + 1024](
        d, cuda.to_device(a), cuda.to_device(b))
    assert_close(d.copy_to_host(), a64 @ b64, 1e-6, "wgmma accumulators by the maps")


@cuda.jit
def maps_kernel(places):
    # places (128, 3) int32: each thread's mma row and column, and its wgmma row
    t = cuda.threadIdx.x
    places[t, 0] = accumulator_row(t)
    places[t, 1] = accumulator_col(t)
    places[t, 2] = wgmma_accumulator_row(t)


def test_the_maps_cover_each_accumulator_once():
    """Over a warp (a warpgroup), the places of every thread's accumulators are the whole
    16 x 8 tile (64 x 8 block of columns) once each: the maps as the device computes them."""
    out = cuda.to_device(poisoned((128, 3), np.int32))
    maps_kernel[1, 128](out)
    places = out.copy_to_host()
    mma = [(places[t, 0] + 8 * h, places[t, 1] + e)
           for t in range(32) for h in range(2) for e in range(2)]
    assert sorted(mma) == [(r, c) for r in range(16) for c in range(8)]
    wgmma = [(places[t, 2] + 8 * h, places[t, 1] + e)
             for t in range(128) for h in range(2) for e in range(2)]
    assert sorted(wgmma) == [(r, c) for r in range(64) for c in range(8)]


def test_the_test_kernels_compile_for_sm90():
    compiles_for_sm90("test_kernels_layouts", """
cuda.compile_ptx(t.mma_map_kernel.py_func, (float32[:, ::1], uint32[:, ::1], uint32[:, ::1]),
                 cc=(9, 0))
cuda.compile_ptx(t.wgmma_map_kernel().py_func, (float32[:, ::1], uint16[:, ::1],
                 uint16[:, ::1]), cc=(9, 0))
cuda.compile_ptx(t.maps_kernel.py_func, (int32[:, ::1],), cc=(9, 0))
""")
