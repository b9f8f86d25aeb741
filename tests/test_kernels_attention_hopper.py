"""The wgmma forward of flash attention (kernels/attention/hopper.py) against the float64
reference (microgpt.reference.attention_forward) on the same bf16-rounded q, k, v, with
the tolerances of the mma.sync kernels' tests (tests/test_kernels_flash_attention.py,
which derives them: out 2^-7, lse float32's), and its new atom, wgmma with A from
registers, against NumPy.

The heads lie either way the bulk copies see them (hopper.head_matrix): arrays of their
own, or the parts of fused rows as the bf16 step passes them; the fused outputs are
poisoned whole and compared whole (a write past T, or a head off, lands in a neighbour's
place). T is drawn across tiles and steps with ragged ends (boxes that read the next
head's rows, masked), T = 1 included. In the simulator a warpgroup is 128 Python
threads: one warpgroup a block, 64 keys a step, a few examples.
"""
import functools

import numpy as np
import pytest
from helpers import (ON_GPU, REAL_SHAPES, TOL_F32_OP, assert_close, bf16, from_bf16,
                     poisoned, randn, record_launchers)
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st
from numba import cuda, float32, int32, uint16, uint32, uint64
from test_kernels_flash_attention import TOL_OUT, Heads, poisoned_heads
from test_kernels_mma import place

from microgpt import reference as ref
from microgpt.kernels.atoms import (fence_proxy_async, named_barrier, named_barrier_arrive,
                                    pack_bf16x2, shared_address,
                                    warpgroup_commit, warpgroup_fence, warpgroup_wait,
                                    wgmma_bf16_acc, wgmma_bf16_rs)
from microgpt.kernels.attention import hopper
from microgpt.kernels.attention.hopper import HopperTile

SEEDS = st.integers(0, 2**32 - 1)

if REAL_SHAPES:
    SHAPES = st.tuples(st.integers(1, 16), st.integers(1, 12), st.integers(1, 1024),
                       st.sampled_from([64, 128]))
    TILES = st.sampled_from([None, HopperTile(1, 64, 3), HopperTile(3, 128, 3),
                             HopperTile(2, 128, 3, True), HopperTile(2, 128, 3, False, True),
                             HopperTile(2, 128, 4, True, True),
                             HopperTile(2, 64, 4, False, True, 2),
                             HopperTile(2, 128, 3, False, True, 1, True),
                             HopperTile(2, 64, 4, False, True, 2, True),
                             HopperTile(2, 128, 3, True, True, donate=True),
                             HopperTile(3, 128, 3, True, True, donate=True),
                             HopperTile(3, 64, 4, True, donate=True)])
else:
    SHAPES = st.tuples(st.just(1), st.sampled_from([1, 2]), st.integers(1, 64),
                       st.just(64))
    TILES = st.just(HopperTile(1, 64, 3))


def fits(tile, D):
    """Whether a drawn tile fits the shared memory at this head_dim (the refusal is tested
    below)."""
    try:
        hopper.check_tile(hopper.default_tile(D, 1) if tile is None else tile, D)
    except ValueError:
        return False
    return True


def check_forward(shape, tile, seed, fused):
    rng = np.random.default_rng(seed)
    (q, q64), (k, k64), (v, v64) = (bf16(randn(rng, *shape)) for _ in range(3))
    out = poisoned_heads(shape, 1, fused)
    lse = cuda.to_device(poisoned(shape[:3]))
    hopper.hopper_attention_forward(*out.views, lse, *Heads([q, k, v], fused).views,
                                    tile=tile)
    want_out, want_lse = ref.attention_forward(q64, k64, v64)
    what = f"wgmma attention {shape} tile={tile} fused={fused}"
    assert_close(from_bf16(out.to_host()[0]), want_out, TOL_OUT, what + " out")
    assert_close(lse.copy_to_host(), want_lse, TOL_F32_OP, what + " lse")


@settings(max_examples=settings.default.max_examples if ON_GPU else 1)
@given(shape=SHAPES, tile=TILES, seed=SEEDS, fused=st.booleans())
# T = 1; in the simulator D 128 (two panels a row) in two blocks of 64 rows, the second
# walking two steps, ragged at T. Real shapes walk eight steps and more (every stage
# refilled); a simulated block step costs ~1.5 s
@example(shape=(1, 1, 1, 64), tile=None if REAL_SHAPES else HopperTile(1, 64, 3), seed=1,
         fused=False)
@example(shape=(1, 2, 1000, 128) if REAL_SHAPES else (1, 1, 70, 128),
         tile=None if REAL_SHAPES else HopperTile(1, 64, 3), seed=2, fused=True)
# on the GPU D 64's default from LONG_T on (three computing warpgroups), ragged at T; in
# the simulator four steps through three stages (one refilled: a step's end, its stage's
# release and the copies, runs at the next iteration's head)
@example(shape=(1, 2, hopper.LONG_T + 3, 64) if REAL_SHAPES else (1, 1, 200, 64),
         tile=None if REAL_SHAPES else HopperTile(1, 64, 3), seed=3, fused=True)
def test_hopper_attention_forward(shape, tile, seed, fused):
    assume(fits(tile, shape[3]))
    check_forward(shape, tile, seed, fused)


def test_persistent_blocks_walk_every_tile(monkeypatch):
    """A persistent launch on one SM: its block walks every query tile of every head (the
    tiles' order, q's two buffers, the copies of the next tile's steps under this one's
    last: six steps through three stages, each refilled)."""
    monkeypatch.setattr(hopper, "SMS", 1)
    tile = HopperTile(1, 64, 3, persistent=True) if not REAL_SHAPES else HopperTile(
        2, 128, 3, pingpong=True, persistent=True)
    check_forward((1, 2, 70, 64) if not REAL_SHAPES else (2, 3, 1000, 64), tile, 4, False)


def test_head_matrix_finds_both_layouts():
    """Arrays of their own are (B H T, D) matrices, the fused rows' parts (B T, H D) ones
    from each part's first element; a view of neither is refused (flash's then)."""
    x = cuda.to_device(np.zeros((2, 3, 5, 64), np.uint16))
    matrix, layout = hopper.head_matrix(x)
    assert matrix.shape == (30, 64) and layout == (15, 5, 0)
    rows = Heads([np.zeros((2, 3, 5, 64), np.uint16)] * 3, fused=True)
    matrix, layout = hopper.head_matrix(rows.views[1])
    assert matrix.shape == (10, 192) and matrix.strides == (2 * 576, 2)
    assert layout == (5, 0, 64)
    assert hopper.head_matrix(x[:, :, 1:4]) is None


def test_hopper_attention_rejects_bad_arguments():
    x = cuda.to_device(np.ones((1, 2, 3, 64), np.uint16))
    lse = cuda.to_device(np.ones((1, 2, 3), np.float32))
    with pytest.raises(ValueError, match="head_dim 32"):
        y = cuda.to_device(np.ones((1, 2, 3, 32), np.uint16))
        hopper.hopper_attention_forward(y, lse, y, y, y)
    with pytest.raises(ValueError, match="step must be"):
        hopper.hopper_attention_forward(x, lse, x, x, x, tile=HopperTile(2, 96, 2))
    with pytest.raises(ValueError, match="stages must be 3 or 4"):
        hopper.hopper_attention_forward(x, lse, x, x, x, tile=HopperTile(2, 64, 2))
    with pytest.raises(ValueError, match="shared memory"):
        y = cuda.to_device(np.ones((1, 2, 3, 128), np.uint16))
        hopper.hopper_attention_forward(y, lse, y, y, y, tile=HopperTile(2, 128, 4))
    with pytest.raises(ValueError, match="no view of a matrix"):
        hopper.hopper_attention_forward(x, lse, cuda.to_device(
            np.ones((1, 2, 6, 64), np.uint16))[:, :, 1:4], x, x)


# wgmma m64nNk16 with A from registers (or with scale-d an operand, A from the image too):
# thread i of the warpgroup holds the mma.sync A
# fragment of its warp's 16 rows (w = i // 32, g and t of its lane), B lies in the image
# as its descriptor says (test_kernels_mma.place)
RS_N, RS_A, RS_IMAGE = 32, 2048, 4096


@functools.cache
def wgmma_rs_kernel(trans_b, accumulate=None):
    """accumulate None: A from registers; 0 or 1: wgmma_bf16_acc with that scale-d, A
    from byte RS_A of the image (its descriptor's fields: fields[1])."""
    regs = RS_N // 2
    mma = wgmma_bf16_rs(RS_N, trans_b)
    mma_acc = wgmma_bf16_acc(RS_N, False, trans_b)
    fence, wait = warpgroup_fence(regs), warpgroup_wait(0, regs)

    @cuda.jit
    def kernel(d, a, image, c, fields):
        # d, c (64, N) float32; a (64, 16) float32 (bf16 values); image (RS_IMAGE // 2,)
        # bf16 bits; fields: B's descriptor bits other than the start address
        smem = cuda.shared.array(0, uint16)
        start = (1024 - shared_address(smem, 0) % 1024) % 1024 // 2
        for e in range(cuda.threadIdx.x, image.shape[0], 128):
            smem[start + e] = image[e]
        fence_proxy_async()
        cuda.syncthreads()
        i = cuda.threadIdx.x
        row, t = 16 * (i // 32) + i % 32 // 4, i % 4
        acc = cuda.local.array(regs, float32)
        for j in range(RS_N // 8):
            for h in range(2):
                for e in range(2):
                    acc[4 * j + 2 * h + e] = c[row + 8 * h, 8 * j + 2 * t + e]
        a0 = pack_bf16x2(a[row, 2 * t], a[row, 2 * t + 1])
        a1 = pack_bf16x2(a[row + 8, 2 * t], a[row + 8, 2 * t + 1])
        a2 = pack_bf16x2(a[row, 8 + 2 * t], a[row, 9 + 2 * t])
        a3 = pack_bf16x2(a[row + 8, 8 + 2 * t], a[row + 8, 9 + 2 * t])
        desc_b = uint64(shared_address(smem, int32(start)) >> 4 & 0x3FFF) | fields[0]
        fence(acc)
        if accumulate is None:
            mma(smem, a0, a1, a2, a3, desc_b, acc)
        else:
            desc_a = uint64(shared_address(smem, int32(start + RS_A // 2)) >> 4
                            & 0x3FFF) | fields[1]
            mma_acc(smem, desc_a, desc_b, acc, uint32(accumulate))
        warpgroup_commit()
        wait(acc)
        for j in range(RS_N // 8):
            for h in range(2):
                for e in range(2):
                    d[row + 8 * h, 8 * j + 2 * t + e] = acc[4 * j + 2 * h + e]
    return kernel


@given(seed=SEEDS)
@settings(max_examples=2)
@pytest.mark.parametrize("trans_b, row_bytes", [(True, 32), (False, 64)])
def test_wgmma_rs_matches_numpy(seed, trans_b, row_bytes):
    """B MN-major (as flash attention's v) over two panels, and K-major."""
    rng = np.random.default_rng(seed)
    image = rng.integers(0, 2**16, RS_IMAGE // 2).astype(np.uint16)
    _, a64 = bf16(randn(rng, 64, 16))
    b, b64 = bf16(randn(rng, 16, RS_N))
    fields = np.array([place(image, 0, b.T, trans_b, row_bytes)], np.uint64)
    c = randn(rng, 64, RS_N)
    d = cuda.to_device(poisoned((64, RS_N)))
    wgmma_rs_kernel(trans_b)[1, 128, 0, RS_IMAGE + 1024](
        d, cuda.to_device(a64.astype(np.float32)), cuda.to_device(image), cuda.to_device(c),
        cuda.to_device(fields))
    assert_close(d.copy_to_host(), a64 @ b64 + c, 1e-6, "wgmma m64n32k16, A in registers")


@pytest.mark.parametrize("accumulate", [0, 1])
def test_wgmma_acc_overwrites_or_accumulates(accumulate):
    """scale-d 0: D = A . B whatever the accumulators held; 1: D = A . B + C."""
    rng = np.random.default_rng(accumulate)
    image = rng.integers(0, 2**16, RS_IMAGE // 2).astype(np.uint16)
    a, a64 = bf16(randn(rng, 64, 16))
    b, b64 = bf16(randn(rng, 16, RS_N))
    fields = np.array([place(image, 0, b.T, True, 32), place(image, RS_A, a, False, 32)],
                      np.uint64)
    c = randn(rng, 64, RS_N)
    d = cuda.to_device(poisoned((64, RS_N)))
    wgmma_rs_kernel(True, accumulate)[1, 128, 0, RS_IMAGE + 1024](
        d, cuda.to_device(a64.astype(np.float32)), cuda.to_device(image), cuda.to_device(c),
        cuda.to_device(fields))
    assert_close(d.copy_to_host(), a64 @ b64 + accumulate * c, 1e-6,
                 f"wgmma m64n32k16, scale-d {accumulate}")


def test_the_attention_op_sends_hopper_heads_here(monkeypatch):
    """kernels.attention's forward, the op the model calls, runs bf16 heads of head_dim 64
    and 128 from T = MIN_T on here on a Hopper GPU and on flash's mma.sync kernels
    elsewhere (the simulator, other GPUs, other widths, shorter T): each launcher recorded
    and, on a GPU, run and its results
    compared with float64 (in the simulator a recorded call launches nothing: flash's
    tests run it)."""
    from microgpt.kernels import attention
    from microgpt.kernels.attention import flash

    calls = record_launchers(monkeypatch, ((hopper, "hopper_attention_forward"), (flash, "flash_attention_forward")), ON_GPU)
    hopper_gpu = ON_GPU and cuda.get_current_device().compute_capability[0] == 9
    for D, T in ((64, hopper.MIN_T), (32, hopper.MIN_T), (64, 5)):
        shape = (1, 2, T, D)
        rng = np.random.default_rng(D)
        (q, q64), (k, k64), (v, v64) = (bf16(randn(rng, *shape)) for _ in range(3))
        out = cuda.to_device(poisoned(shape, np.uint16))
        lse = cuda.to_device(poisoned(shape[:3]))
        attention.attention_forward(out, lse, *map(cuda.to_device, (q, k, v)))
        want = ("hopper_attention_forward" if hopper_gpu and D == 64 and T >= hopper.MIN_T
                else "flash_attention_forward")
        assert calls.pop() == want and calls == []
        if not ON_GPU:
            continue
        want_out, want_lse = ref.attention_forward(q64, k64, v64)
        assert_close(from_bf16(out.copy_to_host()), want_out, TOL_OUT, f"the op's out, D {D} T {T}")
        assert_close(lse.copy_to_host(), want_lse, TOL_F32_OP, f"the op's lse, D {D}")


@cuda.jit
def arrive_kernel(out, value):
    # warp 0 writes, arrives at barrier 1 of 64 threads and runs on; warp 1 waits there
    cell = cuda.shared.array(1, int32)
    if cuda.threadIdx.x < 32:
        if cuda.threadIdx.x == 0:
            cell[0] = value
        named_barrier_arrive(1, 64)
    else:
        named_barrier(1, 64)
        out[cuda.threadIdx.x - 32] = cell[0]


def test_named_barrier_arrive_releases_the_waiting_warp():
    out = cuda.to_device(np.full(32, -1, np.int32))
    arrive_kernel[1, 64](out, 7)
    np.testing.assert_array_equal(out.copy_to_host(), 7)
