"""The residual and GELU kernels against the float64 reference (kernels/elementwise.py)."""
import numpy as np
import pytest
from helpers import ON_GPU, TOL_F32_OP, assert_close, poisoned, randn
from hypothesis import given
from hypothesis import strategies as st
from numba import cuda

from microgpt import reference as ref
from microgpt.kernels import elementwise

# (B, T, X) activations: tiny in the simulator, up to andrea-120m's MLP (16, 1024, 3072)
if ON_GPU:
    # a real-shape example costs seconds of host-side data and float64 reference
    SHAPES = st.one_of(st.just((16, 1024, 3072)),
                       st.tuples(st.integers(1, 16), st.integers(1, 1024), st.integers(1, 3072)))
    BLOCKS = st.sampled_from([32, 96, 256, 1024])
else:
    SHAPES = st.tuples(st.integers(1, 2), st.integers(1, 5), st.integers(1, 12))
    BLOCKS = st.sampled_from([32, 48])
SEEDS = st.integers(0, 2**32 - 1)
# GELU's interesting range: the tails where tanh saturates and the bend near 0
SCALES = st.sampled_from([0.5, 2.0, 6.0])


@given(shape=SHAPES, block=BLOCKS, seed=SEEDS)
def test_residual_forward(shape, block, seed):
    rng = np.random.default_rng(seed)
    a, b = randn(rng, *shape), randn(rng, *shape)
    out = cuda.to_device(poisoned(shape))
    elementwise.residual_forward(out, cuda.to_device(a), cuda.to_device(b), block=block)
    assert_close(out.copy_to_host(), ref.residual_forward(a.astype(np.float64), b),
                 TOL_F32_OP, "residual")


@given(shape=SHAPES, block=BLOCKS, scale=SCALES, seed=SEEDS)
def test_gelu_forward(shape, block, scale, seed):
    x = randn(np.random.default_rng(seed), *shape, scale=scale)
    out = cuda.to_device(poisoned(shape))
    elementwise.gelu_forward(out, cuda.to_device(x), block=block)
    assert_close(out.copy_to_host(), ref.gelu_forward(x.astype(np.float64)), TOL_F32_OP, "gelu")


@given(shape=SHAPES, block=BLOCKS, scale=SCALES, in_place=st.booleans(), seed=SEEDS)
def test_gelu_backward(shape, block, scale, in_place, seed):
    rng = np.random.default_rng(seed)
    x, dy = randn(rng, *shape, scale=scale), randn(rng, *shape)
    d_dy = cuda.to_device(dy)
    dx = d_dy if in_place else cuda.to_device(poisoned(shape))
    elementwise.gelu_backward(dx, d_dy, cuda.to_device(x), block=block)
    expected = ref.gelu_backward(dy.astype(np.float64), x.astype(np.float64))
    assert_close(dx.copy_to_host(), expected, TOL_F32_OP, f"gelu backward, in place {in_place}")


def test_launchers_reject_bad_arguments():
    x = cuda.to_device(np.ones((2, 3), np.float32))
    with pytest.raises(ValueError, match="b: expected shape"):
        elementwise.residual_forward(x, x, cuda.to_device(np.ones((3, 2), np.float32)))
    with pytest.raises(TypeError, match="inp: expected dtype float32"):
        elementwise.gelu_forward(x, cuda.to_device(np.ones((2, 3), np.float64)))
    with pytest.raises(TypeError, match="expected a device array"):
        elementwise.gelu_forward(x, np.ones((2, 3), np.float32))
    with pytest.raises(ValueError, match="block size"):
        elementwise.gelu_forward(x, x, block=2048)
