"""The residual and GELU kernels against the float64 reference (kernels/elementwise.py)."""
import numpy as np
import pytest
from helpers import REAL_SHAPES, TOL_F32_OP, assert_close, poisoned, randn
from hypothesis import given
from hypothesis import strategies as st
from numba import cuda

from microgpt import reference as ref
from microgpt.kernels import elementwise

# (B, T, X) activations: tiny in the simulator, up to andrea-120m's MLP (16, 1024, 3072)
SIM_SHAPES = st.tuples(st.integers(1, 2), st.integers(1, 5), st.integers(1, 12))
# On a GPU the simulator's own shapes are drawn too: small sizes and edges where an
# out-of-range index shows in the simulator (IndexError) but passes unseen on a GPU
# unless compute-sanitizer watches.
if REAL_SHAPES:
    # a real-shape example costs seconds of host-side data and float64 reference
    SHAPES = st.one_of(st.just((16, 1024, 3072)),
                       st.tuples(st.integers(1, 16), st.integers(1, 1024), st.integers(1, 3072)),
                       SIM_SHAPES)
    BLOCKS = st.sampled_from([32, 96, 256, 1024])
else:
    SHAPES = SIM_SHAPES
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


def test_gelu_at_values_written_out():
    """The GELU constants pinned by value: the kernel takes GELU_SCALE from the reference,
    so only numbers written here catch a change to both. Expected values from the float64
    tanh formula (gelu(1) = 0.841192)."""
    x = np.array([1.0, -1.0, 2.0, -3.0], np.float32)
    out, dinp = cuda.to_device(poisoned(4)), cuda.to_device(poisoned(4))
    elementwise.gelu_forward(out, cuda.to_device(x))
    assert_close(out.copy_to_host(), [0.8411919906082768, -0.15880800939172324,
                                      1.954597694087775, -0.0036373920817729943],
                 TOL_F32_OP, "gelu")
    elementwise.gelu_backward(dinp, cuda.to_device(np.ones(4, np.float32)), cuda.to_device(x))
    assert_close(dinp.copy_to_host(), [1.0829640838457826, -0.08296408384578252,
                                       1.0860992566236183, -0.011584166630969516],
                 TOL_F32_OP, "gelu'")


def test_default_block():
    """block left out, as the model launches them, over more than one 256-thread block."""
    rng = np.random.default_rng(4)
    x, y = randn(rng, 300), randn(rng, 300)
    out, dinp = cuda.to_device(poisoned(300)), cuda.to_device(poisoned(300))
    elementwise.residual_forward(out, cuda.to_device(x), cuda.to_device(y))
    assert_close(out.copy_to_host(), x.astype(np.float64) + y, TOL_F32_OP, "residual")
    elementwise.gelu_forward(out, cuda.to_device(x))
    assert_close(out.copy_to_host(), ref.gelu_forward(x.astype(np.float64)), TOL_F32_OP, "gelu")
    elementwise.gelu_backward(dinp, cuda.to_device(y), cuda.to_device(x))
    assert_close(dinp.copy_to_host(), ref.gelu_backward(y.astype(np.float64), x), TOL_F32_OP,
                 "gelu backward")


def test_empty_arrays_launch_nothing(no_launches):
    """The empty-input rule (kernels/common.py): no element, no launch, no error."""
    x = cuda.to_device(np.ones((2, 0, 3), np.float32))
    elementwise.residual_forward(x, x, x)
    elementwise.gelu_forward(x, x)
    elementwise.gelu_backward(x, x, x)


def ones(*shape, dtype=np.float32):
    return cuda.to_device(np.ones(shape, dtype))


LAUNCHERS = {"residual_forward": ("out", "a", "b"), "gelu_forward": ("out", "inp"),
             "gelu_backward": ("dinp", "dout", "inp")}


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_launchers_reject_bad_arguments(launcher):
    """Every argument of every launcher: its shape, dtype, residence, layout; the block."""
    launch, names = getattr(elementwise, launcher), LAUNCHERS[launcher]
    for i, name in enumerate(names):
        def with_arg(arr, **kwargs):
            args = [ones(2, 3) for _ in names]
            args[i] = arr
            launch(*args, **kwargs)
        with pytest.raises(ValueError, match=rf"{name}: expected shape \(2, 3\)" if i else
                           r"expected shape \(3, 2\)"):
            with_arg(ones(3, 2))
        with pytest.raises(TypeError, match=f"{name}: expected dtype float32"):
            with_arg(ones(2, 3, dtype=np.float64))
        with pytest.raises(TypeError, match=f"{name}: expected a device array"):
            with_arg(np.ones((2, 3), np.float32))
        with pytest.raises(ValueError, match=f"{name}: expected a C-contiguous array"):
            with_arg(ones(2, 6)[:, ::2])
    for block in (0, 1025):
        with pytest.raises(ValueError, match="block size"):
            launch(*(ones(2, 3) for _ in names), block=block)
