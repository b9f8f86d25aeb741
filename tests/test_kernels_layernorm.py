"""The LayerNorm kernels against the float64 reference (kernels/layernorm.py)."""
import numpy as np
import pytest
from helpers import ON_GPU, REAL_SHAPES, TOL_F32_OP, assert_close, poisoned, randn
from hypothesis import given
from hypothesis import strategies as st
from numba import cuda

from microgpt import reference as ref
from microgpt.kernels import layernorm

# (N, C) rows: tiny in the simulator (C above the block size too), andrea-120m's on a GPU
SIM_SHAPES = st.tuples(st.integers(1, 5), st.integers(1, 40))
# On a GPU the simulator's own shapes are drawn too: small sizes and edges where an
# out-of-range index shows in the simulator (IndexError) but passes unseen on a GPU
# unless compute-sanitizer watches.
if REAL_SHAPES:
    # a real-shape example costs seconds of host-side data and float64 reference
    SHAPES = st.one_of(st.just((16384, 768)),
                       st.tuples(st.integers(1, 16384), st.integers(1, 1536)), SIM_SHAPES)
    BLOCKS = st.sampled_from([32, 128, 256, 1024])
    ROWS_PER_BLOCK = st.integers(1, 64)
else:
    SHAPES = SIM_SHAPES
    BLOCKS = st.just(32)
    ROWS_PER_BLOCK = st.integers(1, 3)
SEEDS = st.integers(0, 2**32 - 1)


def draw_rows(rng, N, C):
    """Rows with their own offset and spread, as a residual stream has. The spread stays
    well above the offset's float32 resolution: a nearly constant row is ill-conditioned
    for any float32 LayerNorm."""
    spread = rng.uniform(0.2, 5.0, (N, 1)).astype(np.float32)
    return randn(rng, N, C) * spread + randn(rng, N, 1, scale=2.0)


def check_forward(shape, block, seed):
    N, C = shape
    rng = np.random.default_rng(seed)
    x, weight, bias = draw_rows(rng, N, C), randn(rng, C), randn(rng, C)
    out, mean, rstd = (cuda.to_device(poisoned(s)) for s in ((N, C), (N,), (N,)))
    layernorm.layernorm_forward(out, mean, rstd, cuda.to_device(x), cuda.to_device(weight),
                                cuda.to_device(bias), block=block)
    expected = ref.layernorm_forward(x.astype(np.float64), weight.astype(np.float64), bias)
    for name, got, want in zip(("out", "mean", "rstd"), (out, mean, rstd), expected):
        assert_close(got.copy_to_host(), want, TOL_F32_OP, f"layernorm forward {name}")


def check_backward(shape, block, rows_per_block, seed):
    N, C = shape
    rng = np.random.default_rng(seed)
    x, weight, dy = draw_rows(rng, N, C), randn(rng, C), randn(rng, N, C)
    x64 = x.astype(np.float64)
    _, mean, rstd = ref.layernorm_forward(x64, weight.astype(np.float64), np.zeros(C))
    starts = randn(rng, N, C), randn(rng, C), randn(rng, C)      # dinp, dweight, dbias
    dinp, dweight, dbias = (cuda.to_device(s) for s in starts)
    layernorm.layernorm_backward(
        dinp, dweight, dbias, cuda.to_device(dy), cuda.to_device(x), cuda.to_device(weight),
        cuda.to_device(mean.astype(np.float32)), cuda.to_device(rstd.astype(np.float32)),
        block=block, rows_per_block=rows_per_block)
    expected = ref.layernorm_backward(dy.astype(np.float64), x64, weight.astype(np.float64),
                                      mean, rstd)
    for name, got, start, want in zip(("dinp", "dweight", "dbias"), (dinp, dweight, dbias),
                                      starts, expected):
        assert_close(got.copy_to_host(), start + want, TOL_F32_OP, f"layernorm backward {name}")


@given(shape=SHAPES, block=BLOCKS, seed=SEEDS)
def test_layernorm_forward(shape, block, seed):
    check_forward(shape, block, seed)


@given(shape=SHAPES, block=BLOCKS, rows_per_block=ROWS_PER_BLOCK, seed=SEEDS)
def test_layernorm_backward_accumulates(shape, block, rows_per_block, seed):
    check_backward(shape, block, rows_per_block, seed)


def test_layernorm_of_a_row_written_out():
    """eps pinned by value: the kernel takes LN_EPS from the reference, so only numbers
    written here catch a change to both. The row's variance, 1.15e-5, is near eps = 1e-5;
    expected values from the float64 formula, eps 1e-5."""
    x = np.array([[0.004, -0.001, 0.002, -0.005]], np.float32)
    weight = np.array([2.0, -1.0, 0.5, 3.0], np.float32)
    bias = np.array([0.5, 0.25, -0.75, 1.0], np.float32)
    out, mean, rstd = (cuda.to_device(poisoned(s)) for s in ((1, 4), (1,), (1,)))
    layernorm.layernorm_forward(out, mean, rstd, cuda.to_device(x), cuda.to_device(weight),
                                cuda.to_device(bias))
    assert_close(out.copy_to_host(), [[2.225324371255015, 0.46566554640687685,
                                       -0.5343344535931231, -2.234983196103152]],
                 TOL_F32_OP, "out")
    assert_close(rstd.copy_to_host(), [215.6655464068768], TOL_F32_OP, "rstd")
    assert abs(mean.copy_to_host()[0]) < 1e-9


def test_default_blocks_at_their_caps():
    """block=None as the model launches it, on rows wider than both defaults (128 threads
    forward, 256 backward)."""
    check_forward((2, 300), None, seed=3)
    check_backward((2, 300), None, layernorm.ROWS_PER_BLOCK, seed=4)


def test_backward_at_exactly_48_kib_of_shared_memory():
    """The widest row whose dweight and dbias partials (dynamic, 8 bytes a column) and the
    reduction scratch (static: 32 floats on a GPU, 1024 in the simulator) fill the 48 KiB
    (49152 bytes) a block gets without an opt-in, exactly; one more column is refused. The
    first version counted the dynamic part only, and its widest launch failed on the H200."""
    widest = 6128 if ON_GPU else 5632
    check_backward((1, widest), None, 1, seed=5)
    wide, wide_vec = (cuda.to_device(np.ones(s, np.float32)) for s in ((1, widest + 1),
                                                                       (widest + 1,)))
    stats = cuda.to_device(np.ones(1, np.float32))
    with pytest.raises(ValueError, match=f"C = {widest + 1} needs 49160 bytes of shared memory"):
        layernorm.layernorm_backward(wide, wide_vec, wide_vec, wide, wide, wide_vec, stats,
                                     stats)


def test_no_rows_launch_nothing(no_launches):
    """The empty-input rule (kernels/common.py): N = 0 is no launch, the accumulated
    dweight and dbias keep their values (a sum over no rows adds nothing)."""
    rows, stats = cuda.to_device(np.ones((0, 8), np.float32)), cuda.to_device(poisoned(0))
    vec_start = np.random.default_rng(0).standard_normal(8).astype(np.float32)
    vec = cuda.to_device(vec_start)
    layernorm.layernorm_forward(rows, stats, stats, rows, vec, vec)
    layernorm.layernorm_backward(rows, vec, vec, rows, rows, vec, stats, stats)
    np.testing.assert_array_equal(vec.copy_to_host(), vec_start)


def ones(*shape):
    return cuda.to_device(np.ones(shape, np.float32))


# good shapes for (N, C) = (4, 8); each case changes some
GOOD = dict(out=(4, 8), dinp=(4, 8), dout=(4, 8), inp=(4, 8), weight=(8,), bias=(8,),
            dweight=(8,), dbias=(8,), mean=(4,), rstd=(4,))


def launch(backward, block=None, rows_per_block=1, **shapes):
    a = {name: ones(*shape) for name, shape in {**GOOD, **shapes}.items()}
    if backward:
        layernorm.layernorm_backward(a["dinp"], a["dweight"], a["dbias"], a["dout"], a["inp"],
                                     a["weight"], a["mean"], a["rstd"], block=block,
                                     rows_per_block=rows_per_block)
    else:
        layernorm.layernorm_forward(a["out"], a["mean"], a["rstd"], a["inp"], a["weight"],
                                    a["bias"], block=block)


@pytest.mark.parametrize("backward", [False, True])
@pytest.mark.parametrize("changes,message", [
    (dict(inp=(4, 8, 1)), r"inp: expected shape \(N, C\)"),
    (dict(inp=(4, 0), out=(4, 0), dinp=(4, 0), dout=(4, 0)), "C must be at least 1, got 0"),
    (dict(weight=(7,)), r"weight: expected shape \(8,\)"),
    (dict(mean=(8,)), r"mean: expected shape \(4,\)"),
    (dict(rstd=(3,)), r"rstd: expected shape \(4,\)"),
    (dict(block=0), "block size must be a multiple of 32"),
    (dict(block=48), "block size must be a multiple of 32"),
    (dict(block=1056), "block size must be a multiple of 32"),
])
def test_launchers_reject_bad_arguments(backward, changes, message):
    with pytest.raises(ValueError, match=message):
        launch(backward, **changes)


@pytest.mark.parametrize("backward,changes,message", [
    (False, dict(out=(4, 7)), r"out: expected shape \(4, 8\)"),
    (False, dict(bias=(4,)), r"bias: expected shape \(8,\)"),
    (True, dict(dinp=(8, 4)), r"dinp: expected shape \(4, 8\)"),
    (True, dict(dout=(4,)), r"dout: expected shape \(4, 8\)"),
    (True, dict(dweight=(4,)), r"dweight: expected shape \(8,\)"),
    (True, dict(dbias=(9,)), r"dbias: expected shape \(8,\)"),
    (True, dict(rows_per_block=0), "rows_per_block must be at least 1, got 0"),
])
def test_each_pass_rejects_its_own_bad_arguments(backward, changes, message):
    with pytest.raises(ValueError, match=message):
        launch(backward, **changes)
