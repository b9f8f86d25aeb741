"""The residual and GELU kernels against the float64 reference (kernels/elementwise.py).

Tolerances: float32 results TOL_F32_OP. A bf16 input is exact, and the reference gets the
same bf16-rounded values; a bf16 output is the float32 result rounded, TOL_BF16_OUT
(helpers).
"""
import numpy as np
import pytest
from helpers import (BF16, REAL_SHAPES, TOL_F32_OP, assert_close, assert_output_close, bf16,
                     poisoned, randn, to_device_off_group)
from hypothesis import given
from hypothesis import strategies as st
from numba import cuda

from microgpt import reference as ref
from microgpt.kernels import elementwise
from microgpt.kernels.precision import GROUP, group_width

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
DTYPES = st.sampled_from([np.float32, BF16])


def device_input(x, dtype):
    """-> (x as a device array of dtype, its values in float64)."""
    x, exact = bf16(x) if dtype == BF16 else (x, x.astype(np.float64))
    return cuda.to_device(x), exact




@given(shape=SHAPES, block=BLOCKS, seed=SEEDS)
def test_residual_forward(shape, block, seed):
    rng = np.random.default_rng(seed)
    a, b = randn(rng, *shape), randn(rng, *shape)
    out = cuda.to_device(poisoned(shape))
    elementwise.residual_forward(out, cuda.to_device(a), cuda.to_device(b), block=block)
    assert_close(out.copy_to_host(), ref.residual_forward(a.astype(np.float64), b),
                 TOL_F32_OP, "residual")


@given(shape=SHAPES, block=BLOCKS, scale=SCALES, out_dtype=DTYPES, inp_dtype=DTYPES,
       seed=SEEDS)
def test_gelu_forward(shape, block, scale, out_dtype, inp_dtype, seed):
    x, x64 = device_input(randn(np.random.default_rng(seed), *shape, scale=scale), inp_dtype)
    out = cuda.to_device(poisoned(shape, out_dtype))
    elementwise.gelu_forward(out, x, block=block)
    assert_output_close(out, ref.gelu_forward(x64), f"gelu of {np.dtype(inp_dtype)}")


@given(shape=SHAPES, block=BLOCKS, scale=SCALES, in_place=st.booleans(), dinp_dtype=DTYPES,
       dout_dtype=DTYPES, inp_dtype=DTYPES, act_dtype=st.sampled_from([None, np.float32, BF16]),
       seed=SEEDS)
def test_gelu_backward(shape, block, scale, in_place, dinp_dtype, dout_dtype, inp_dtype,
                       act_dtype, seed):
    """in place when asked and dinp and dout share a dtype; act_dtype: the forward's
    output recomputed too (poisoned before)."""
    rng = np.random.default_rng(seed)
    x, x64 = device_input(randn(rng, *shape, scale=scale), inp_dtype)
    dy, dy64 = device_input(randn(rng, *shape), dout_dtype)
    in_place = in_place and dinp_dtype == dout_dtype
    dx = dy if in_place else cuda.to_device(poisoned(shape, dinp_dtype))
    act = cuda.to_device(poisoned(shape, act_dtype)) if act_dtype else None
    elementwise.gelu_backward(dx, dy, x, act, block=block)
    what = (f"in place {in_place}, dout {np.dtype(dout_dtype)}, inp {np.dtype(inp_dtype)}, "
            f"act {act_dtype and np.dtype(act_dtype)}")
    assert_output_close(dx, ref.gelu_backward(dy64, x64), "gelu backward, " + what)
    if act_dtype:
        assert_output_close(act, ref.gelu_forward(x64), "gelu backward's act, " + what)


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


def test_gelu_tails_keep_their_relative_accuracy():
    """Each value within TOL_F32_OP of its own float64 value, not only in norm: x * sigmoid(2u)
    does not cancel where 1 + tanh(u) is small (x < 0; at x = -5 that sum is 9e-8, and
    float32's 0.5 x (1 + tanh(u)) is 30% off), and 1 - sigmoid is taken from exp(-2u) where
    it is small (x > 0). (Below x = -5 the float64 reference itself cancels: 1 + tanh(u)
    < 1e-12 there.) Beyond x = -10, exp(-2u) overflows: the results are 0, as the float64
    values (below 1e-40) round to."""
    x = np.array([-5.0, -4.0, -3.0, -0.5, 0.5, 3.0, 5.0, 9.0], np.float32)
    far = np.array([-30.0, -12.0], np.float32)
    x64 = x.astype(np.float64)
    for dtype_x, want in ((x, None), (far, 0.0)):
        out, dinp = cuda.to_device(poisoned(len(dtype_x))), cuda.to_device(poisoned(len(dtype_x)))
        elementwise.gelu_forward(out, cuda.to_device(dtype_x))
        elementwise.gelu_backward(dinp, cuda.to_device(np.ones(len(dtype_x), np.float32)),
                                  cuda.to_device(dtype_x))
        if want is not None:
            np.testing.assert_array_equal(out.copy_to_host(), want)
            np.testing.assert_array_equal(dinp.copy_to_host(), want)
            continue
        for i, value in enumerate(x64):
            assert_close(out.copy_to_host()[i:i + 1], ref.gelu_forward(x64[i:i + 1]),
                         TOL_F32_OP, f"gelu({value})")
            assert_close(dinp.copy_to_host()[i:i + 1], ref.gelu_backward(1.0, x64[i:i + 1]),
                         TOL_F32_OP, f"gelu'({value})")


def test_default_block():
    """block left out, as the model launches them, over more than one block: the residual
    add's 256 elements, GELU's 4096 forward and 2048 backward (4 groups of 4 a thread)."""
    n = 4396
    rng = np.random.default_rng(4)
    x, y = randn(rng, n), randn(rng, n)
    out, dinp = cuda.to_device(poisoned(n)), cuda.to_device(poisoned(n))
    elementwise.residual_forward(out, cuda.to_device(x), cuda.to_device(y))
    assert_close(out.copy_to_host(), x.astype(np.float64) + y, TOL_F32_OP, "residual")
    elementwise.gelu_forward(out, cuda.to_device(x))
    assert_close(out.copy_to_host(), ref.gelu_forward(x.astype(np.float64)), TOL_F32_OP, "gelu")
    elementwise.gelu_backward(dinp, cuda.to_device(y), cuda.to_device(x))
    assert_close(dinp.copy_to_host(), ref.gelu_backward(y.astype(np.float64), x), TOL_F32_OP,
                 "gelu backward")
    bits, exact = bf16(x)
    out_bf16 = cuda.to_device(poisoned(n, BF16))
    elementwise.gelu_forward(out_bf16, cuda.to_device(bits))
    assert_output_close(out_bf16, ref.gelu_forward(exact), "gelu, bf16")


@pytest.mark.parametrize("n,off_group,width", [(300, False, GROUP), (301, False, 1),
                                               (300, True, 1)])
def test_gelu_in_groups_or_element_by_element(n, off_group, width):
    """Groups of 4 in one access where the arrays split into them (the model's), and one
    element at a time where the length or an array's start does not; dtypes mixed."""
    rng = np.random.default_rng(n)
    x, dy = randn(rng, n), randn(rng, n)
    bits, exact = bf16(x)
    place = to_device_off_group if off_group else cuda.to_device
    d_x, d_dy = place(bits), place(dy)
    out = cuda.to_device(poisoned(n, BF16))
    assert group_width(n, out, d_x, d_dy) == width
    elementwise.gelu_forward(out, d_x)
    assert_output_close(out, ref.gelu_forward(exact), "gelu, bf16 from bf16")
    act = cuda.to_device(poisoned(n, BF16))
    elementwise.gelu_backward(d_dy, d_dy, d_x, act)
    assert_output_close(d_dy, ref.gelu_backward(dy.astype(np.float64), exact),
                        "gelu backward in place")
    assert_output_close(act, ref.gelu_forward(exact), "gelu backward's act")


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
TAKES_BF16 = {"gelu_forward", "gelu_backward"}


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
        with pytest.raises(TypeError, match=f"{name}: expected dtype float32"):
            with_arg(ones(2, 3, dtype=np.float16))
        if launcher not in TAKES_BF16:
            with pytest.raises(TypeError, match=f"{name}: expected dtype float32, got uint16"):
                with_arg(ones(2, 3, dtype=BF16))
        else:
            with_arg(ones(2, 3, dtype=BF16))       # taken, beside float32 ones
    for block in (0, 1025):
        with pytest.raises(ValueError, match="block size"):
            launch(*(ones(2, 3) for _ in names), block=block)
