"""The wgmma dk/dv pass of flash attention's backward (kernels/attention/hopper_backward.py,
after flash's mma.sync dq pass) against the float64 reference
(microgpt.reference.attention_backward) on the same bf16 inputs and the same bf16 out, with
the tolerances that tests/test_kernels_flash_attention.py derives (dv 2^-7, dq and dk 3 x
2^-8, delta float32's).

The heads lie either way the bulk copies see them (arrays of their own, or the parts of
fused rows as the bf16 step passes them); the outputs are poisoned whole and compared
whole. T is drawn across key tiles and query steps with ragged ends (boxes of q, dout,
lse and delta that read the next head's rows, masked), T = 1 and one head included. In
the simulator a warpgroup is 128 Python threads: one warpgroup a block, a few examples.
"""
import numpy as np
import pytest
from helpers import (ON_GPU, REAL_SHAPES, assert_attention_gradients, bf16, from_bf16,
                     poisoned, randn, record_launchers, to_device_off_group)
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st
from numba import cuda
from test_kernels_flash_attention import TOL_GRAD, TOL_OUT, Heads, poisoned_heads

from microgpt import reference as ref
from microgpt.kernels.attention import hopper_backward as hb
from microgpt.kernels.attention.flash import FlashTile
from microgpt.kernels.attention.hopper_backward import BackwardTile

SEEDS = st.integers(0, 2**32 - 1)
SIM, SIM_32 = BackwardTile(1, 64, 4), BackwardTile(1, 32, 4)
# the dk/dv pass that folds dq in (bulk adds into a float32 sum), no dq pass
SIM_FOLD = BackwardTile(1, 64, 4, fold=True)

if REAL_SHAPES:
    # up to 16 heads of 1024 rows: the float64 reference of a whole andrea-120m backward
    # takes a minute of the CPU (the benchmark checks those against mma.sync's)
    SHAPES = st.tuples(st.integers(1, 4), st.integers(1, 4), st.integers(1, 1024),
                       st.sampled_from([64, 128]))
    TILE = st.sampled_from([None, BackwardTile(1, 64, 4), BackwardTile(2, 64, 8),
                            BackwardTile(1, 32, 4, 2), BackwardTile(1, 32, 4, 3),
                            BackwardTile(2, 32, 4, 2), BackwardTile(2, 64, 8, 1, True),
                            BackwardTile(2, 64, 8, 1, True, True),
                            BackwardTile(2, 32, 4, 1, True, True),
                            BackwardTile(1, 64, 4, 2, True, True),
                            BackwardTile(1, 32, 4, 2, True, True)])
    # the fold (no dq pass: tiles[0] None) as it fits: at D 64 the measured one (hb.FOLD_TILE)
    FOLD = st.sampled_from([BackwardTile(1, 64, 4, fold=True), hb.FOLD_TILE,
                            BackwardTile(2, 64, 4, 1, True, True, True),
                            BackwardTile(1, 64, 4, 2, True, True, True),
                            BackwardTile(1, 64, 8, 1, True, True, True)])
    TILES = st.one_of(st.tuples(st.one_of(TILE, st.just(FlashTile(64, 32))), TILE),
                      st.tuples(st.none(), FOLD))
else:
    SHAPES = st.tuples(st.just(1), st.sampled_from([1, 2]), st.integers(1, 70),
                       st.just(64))
    TILE = st.sampled_from([BackwardTile(1, 64, 4), BackwardTile(1, 32, 4)])
    TILES = st.tuples(TILE, TILE)


def fits(tiles, D):
    try:
        for tile, kind in zip(tiles, ("dq", "dkdv")):
            if not isinstance(tile, FlashTile):
                hb.check_tile(hb.default_tile(D, kind) if tile is None else tile, D, kind)
    except ValueError:
        return False
    return True


def check_backward(shape, tiles, seed, fused):
    rng = np.random.default_rng(seed)
    (q, q64), (k, k64), (v, v64), (dout, dout64) = (bf16(randn(rng, *shape))
                                                     for _ in range(4))
    want_out, want_lse = ref.attention_forward(q64, k64, v64)
    out, _ = bf16(want_out.astype(np.float32))          # as the forward stores them
    grads = poisoned_heads(shape, 3, fused)
    delta = cuda.to_device(poisoned(shape[:3]))
    (dout_dev,), (out_dev,) = Heads([dout], fused).views, Heads([out], fused).views
    hb.hopper_attention_backward(*grads.views, delta, dout_dev,
                                 *Heads([q, k, v], fused).views, out_dev,
                                 cuda.to_device(want_lse.astype(np.float32)), tiles=tiles)
    got = [from_bf16(g) for g in grads.to_host()] + [delta.copy_to_host()]
    out64 = from_bf16(out)
    want = (*ref.attention_backward(dout64, q64, k64, v64, out64, want_lse),
            ref.attention_delta(dout64, out64))
    what = f"wgmma attention backward {shape} tiles={tiles} fused={fused}"
    assert_attention_gradients(got, want, dout64, q64, k64, v64, TOL_OUT, TOL_GRAD, what)


@settings(max_examples=settings.default.max_examples if ON_GPU else 1)
@given(shape=SHAPES, tiles=TILES, seed=SEEDS, fused=st.booleans())
# T = 1 in one head; in the simulator two key tiles of 64, the first walking three query
# steps of 32 through three stages (one refilled), ragged at T, and D 128 (two panels a
# row); on the GPU a producer warp's copies, ragged, and a long walk at D 128
@example(shape=(1, 1, 1, 64), tiles=(None, None) if REAL_SHAPES else (SIM, SIM), seed=1,
         fused=False)
@example(shape=(1, 1, 70, 64), tiles=((BackwardTile(2, 64, 4, 1, True), None) if REAL_SHAPES
                                      else (SIM_32, SIM_32)), seed=2, fused=True)
@example(shape=(1, 2, 1000, 128) if REAL_SHAPES else (1, 1, 40, 128),
         tiles=(None, None) if REAL_SHAPES else (SIM_32, SIM_32), seed=3, fused=False)
# a head whose lse and delta do not start on a 16-byte boundary ((b H + h) T not a multiple
# of 4): their bulk copies took an illegal instruction on the H200 (session 21's call A,
# this example) until the boxes started at the boundary before (the simulator's copy
# twins refuse such a box, as the hardware does)
@example(shape=(4, 4, 265, 64) if REAL_SHAPES else (1, 2, 5, 64),
         tiles=(FlashTile(64, 32), BackwardTile(1, 64, 4)) if REAL_SHAPES else (SIM, SIM),
         seed=191, fused=True)
# on the GPU both passes with a producer warpgroup donating its registers (setmaxnreg, the
# driver's whole-program JIT), ragged over several heads (the simulator runs no producer)
@(example(shape=(2, 3, 265, 64), tiles=(BackwardTile(2, 64, 8, 1, True, True),) * 2, seed=4,
          fused=True) if REAL_SHAPES else lambda test: test)
def test_hopper_attention_backward(shape, tiles, seed, fused):
    assume(fits(tiles, shape[3]))
    check_backward(shape, tiles, seed, fused)


# the fold takes head_dim 64 alone
FOLD_SHAPES = SHAPES.map(lambda shape: (*shape[:3], 64))


@settings(max_examples=settings.default.max_examples if ON_GPU else 1)
@given(shape=FOLD_SHAPES, seed=SEEDS, fused=st.booleans())
# ragged T over two key tiles (the second's keys past T, a query box past T into the head's
# padded rows of the sum), two heads and two batches; one short head
@example(shape=(2, 3, 1000, 64) if REAL_SHAPES else (2, 2, 70, 64), seed=5, fused=True)
@example(shape=(1, 2, 265, 64) if REAL_SHAPES else (1, 1, 9, 64), seed=6, fused=False)
def test_hopper_attention_backward_folds_dq(shape, seed, fused):
    """dq by the dk/dv pass's bulk adds (BackwardTile.fold): dq, dk, dv and delta against
    float64, the outputs poisoned; on the GPU the tile measured (hb.FOLD_TILE) where it
    fits."""
    tile = SIM_FOLD
    if ON_GPU and fits((None, hb.FOLD_TILE), shape[3]):
        tile = hb.FOLD_TILE
    check_backward(shape, (None, tile), seed, fused)


@settings(max_examples=settings.default.max_examples if ON_GPU else 2)
@given(seed=SEEDS, heads=st.integers(1, 2), T=st.integers(1, 70))
def test_fold_rows_pass_writes_delta_and_zeroes_the_sum(seed, heads, T):
    """The fold's first pass against NumPy: delta = rowsum(dout * out), the sum's rows of
    every head (padded ones too) zeroed from poison."""
    rng = np.random.default_rng(seed)
    B, D = 1, 64
    Tp = -(-T // 64) * 64
    (dout, dout64), (out, out64) = (bf16(randn(rng, B, heads, T, D)) for _ in range(2))
    delta = cuda.to_device(poisoned((B, heads, T)))
    dq_sum = cuda.to_device(poisoned((B * heads * Tp, D)))
    hb.fold_rows_kernel(D)[(Tp // (hb.ROW_THREADS // 4), heads, B), hb.ROW_THREADS](
        delta, dq_sum, *map(cuda.to_device, (dout, out)))
    np.testing.assert_allclose(delta.copy_to_host(), ref.attention_delta(dout64, out64),
                               rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(dq_sum.copy_to_host(), 0)


def test_statistics_row_is_the_heads_one_after_another():
    x = cuda.to_device(np.arange(2 * 3 * 5, dtype=np.float32).reshape(2, 3, 5))
    row = hb.statistics_row(x)
    assert row.shape == (1, 30) and row.strides == (128, 4)
    np.testing.assert_array_equal(row.copy_to_host()[0], np.arange(30))


def test_hopper_attention_backward_rejects_bad_arguments():
    x = cuda.to_device(np.ones((1, 2, 3, 64), np.uint16))
    rows = cuda.to_device(np.ones((1, 2, 3), np.float32))
    args = (x, x, x, rows, x, x, x, x, x, rows)
    with pytest.raises(ValueError, match="head_dim 32"):
        y = cuda.to_device(np.ones((1, 2, 3, 32), np.uint16))
        hb.hopper_attention_backward(y, y, y, rows, y, y, y, y, y, rows)
    with pytest.raises(ValueError, match="step must be"):
        hb.hopper_attention_backward(*args, tiles=(None, BackwardTile(1, 128, 3)))
    with pytest.raises(ValueError, match="stages must be 4 or 8"):
        hb.hopper_attention_backward(*args, tiles=(BackwardTile(1, 64, 6), None))
    with pytest.raises(ValueError, match="16-byte aligned"):
        off = to_device_off_group(np.ones((1, 2, 3), np.float32))
        hb.hopper_attention_backward(x, x, x, off, x, x, x, x, x, rows)
    with pytest.raises(ValueError, match="a fold is the dk/dv pass's"):
        hb.hopper_attention_backward(*args, tiles=(None, BackwardTile(1, 32, 4, fold=True)))
    with pytest.raises(ValueError, match="a fold is the dk/dv pass's at head_dim 64"):
        y = cuda.to_device(np.ones((1, 2, 3, 128), np.uint16))
        hb.hopper_attention_backward(y, y, y, rows, y, y, y, y, y, rows,
                                     tiles=(None, BackwardTile(1, 64, 4, fold=True)))
    with pytest.raises(ValueError, match="computes dq itself"):
        hb.hopper_attention_backward(*args, tiles=(SIM, BackwardTile(1, 64, 4, fold=True)))
    with pytest.raises(ValueError, match="donate hands a producer warpgroup's registers"):
        hb.hopper_attention_backward(*args, tiles=(None, BackwardTile(2, 64, 8, 1, False, True)))
    if not ON_GPU:
        with pytest.raises(ValueError, match="producer warp runs on the GPU only"):
            hb.hopper_attention_backward(*args, tiles=(BackwardTile(1, 64, 4, 1, True), None))
    # (a producer warp that does not donate; two blocks of two warpgroups)
    for tile in (BackwardTile(2, 64, 8, 1, True), BackwardTile(2, 32, 4, 2)):
        with pytest.raises(ValueError, match="would spill|GPU only"):
            hb.hopper_attention_backward(*args, tiles=(None, tile))


@pytest.mark.parametrize("routed", [False, True])
def test_the_attention_op_sends_hopper_heads_here(monkeypatch, routed):
    """kernels.attention's backward, the op the model calls, runs bf16 heads of head_dim 64
    and 128 from T = hopper.MIN_T on (T off a multiple of 4 too: a second head's
    statistics then start off a 16-byte boundary) here on a Hopper GPU when
    attention.HOPPER_BACKWARD is set, and on flash's mma.sync kernels otherwise (unset, the
    simulator, other GPUs, other widths, shorter T): each launcher
    recorded and, on a GPU, run and its results compared with float64 (in the simulator a
    recorded call launches nothing: the tests above and flash's run them)."""
    from microgpt.kernels import attention
    from microgpt.kernels.attention import flash_backward, hopper

    monkeypatch.setattr(attention, "HOPPER_BACKWARD", routed)
    calls = record_launchers(monkeypatch, ((hb, "hopper_attention_backward"),
                                           (flash_backward, "flash_attention_backward")), ON_GPU)
    hopper_gpu = ON_GPU and cuda.get_current_device().compute_capability[0] == 9
    for D, T in ((64, hopper.MIN_T), (32, hopper.MIN_T), (64, 5), (64, hopper.MIN_T + 2)):
        shape = (1, 2, T, D)
        rng = np.random.default_rng(D)
        (q, q64), (k, k64), (v, v64), (dout, dout64) = (bf16(randn(rng, *shape))
                                                         for _ in range(4))
        want_out, want_lse = ref.attention_forward(q64, k64, v64)
        out, _ = bf16(want_out.astype(np.float32))
        grads = [cuda.to_device(poisoned(shape, np.uint16)) for _ in range(3)]
        delta = cuda.to_device(poisoned(shape[:3]))
        attention.attention_backward(*grads, delta, *map(cuda.to_device, (dout, q, k, v, out)),
                                     cuda.to_device(want_lse.astype(np.float32)))
        want = ("hopper_attention_backward" if routed and hopper_gpu and D == 64
                and T >= hopper.MIN_T
                else "flash_attention_backward")
        assert calls.pop() == want and calls == []
        if not ON_GPU:
            continue
        out64 = from_bf16(out)
        got = [from_bf16(g.copy_to_host()) for g in grads] + [delta.copy_to_host()]
        assert_attention_gradients(
            got, (*ref.attention_backward(dout64, q64, k64, v64, out64, want_lse),
                  ref.attention_delta(dout64, out64)), dout64, q64, k64, v64, TOL_OUT,
            TOL_GRAD, f"the op's backward, D {D} T {T}")
