"""The LayerNorm kernels against the float64 reference (kernels/layernorm.py)."""
import numpy as np
import pytest
from helpers import ON_GPU, TOL_F32_OP, assert_close, poisoned, randn
from hypothesis import given
from hypothesis import strategies as st
from numba import cuda

from microgpt import reference as ref
from microgpt.kernels import layernorm

# (N, C) rows: tiny in the simulator (C above the block size too), andrea-120m's on a GPU
if ON_GPU:
    # a real-shape example costs seconds of host-side data and float64 reference
    SHAPES = st.one_of(st.just((16384, 768)),
                       st.tuples(st.integers(1, 16384), st.integers(1, 1536)))
    BLOCKS = st.sampled_from([32, 128, 256, 1024])
    ROWS_PER_BLOCK = st.integers(1, 64)
else:
    SHAPES = st.tuples(st.integers(1, 5), st.integers(1, 40))
    BLOCKS = st.just(32)
    ROWS_PER_BLOCK = st.integers(1, 3)
SEEDS = st.integers(0, 2**32 - 1)


def draw_rows(rng, N, C):
    """Rows with their own offset and spread, as a residual stream has. The spread stays
    well above the offset's float32 resolution: a nearly constant row is ill-conditioned
    for any float32 LayerNorm."""
    spread = rng.uniform(0.2, 5.0, (N, 1)).astype(np.float32)
    return randn(rng, N, C) * spread + randn(rng, N, 1, scale=2.0)


@given(shape=SHAPES, block=BLOCKS, seed=SEEDS)
def test_layernorm_forward(shape, block, seed):
    N, C = shape
    rng = np.random.default_rng(seed)
    x, weight, bias = draw_rows(rng, N, C), randn(rng, C), randn(rng, C)
    out, mean, rstd = (cuda.to_device(poisoned(s)) for s in ((N, C), (N,), (N,)))
    layernorm.layernorm_forward(out, mean, rstd, cuda.to_device(x), cuda.to_device(weight),
                                cuda.to_device(bias), block=block)
    expected = ref.layernorm_forward(x.astype(np.float64), weight.astype(np.float64), bias)
    for name, got, want in zip(("out", "mean", "rstd"), (out, mean, rstd), expected):
        assert_close(got.copy_to_host(), want, TOL_F32_OP, f"layernorm forward {name}")


@given(shape=SHAPES, block=BLOCKS, rows_per_block=ROWS_PER_BLOCK, seed=SEEDS)
def test_layernorm_backward_accumulates(shape, block, rows_per_block, seed):
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


def test_launchers_reject_bad_arguments():
    rows, vec = cuda.to_device(np.ones((4, 8), np.float32)), cuda.to_device(np.ones(8, np.float32))
    stats = cuda.to_device(np.ones(4, np.float32))
    with pytest.raises(ValueError, match="block size must be a multiple of 32"):
        layernorm.layernorm_forward(rows, stats, stats, rows, vec, vec, block=48)
    with pytest.raises(ValueError, match=r"mean: expected shape \(4,\)"):
        layernorm.layernorm_forward(rows, vec, stats, rows, vec, vec)
    with pytest.raises(ValueError, match="rows_per_block must be at least 1"):
        layernorm.layernorm_backward(rows, vec, vec, rows, rows, vec, stats, stats,
                                     rows_per_block=0)
    wide, wide_vec = (cuda.to_device(np.ones(s, np.float32)) for s in ((4, 8192), (8192,)))
    with pytest.raises(ValueError, match="C = 8192 needs 65536 bytes of shared memory"):
        layernorm.layernorm_backward(wide, wide_vec, wide_vec, wide, wide, wide_vec, stats, stats)
