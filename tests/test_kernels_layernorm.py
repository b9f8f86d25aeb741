"""The LayerNorm kernels against the float64 reference (kernels/layernorm.py): the
residual add fused into the forward, and the bf16 variants.

Tolerances: float32 results TOL_F32_OP. A bf16 `out` is the float32 result rounded to
bf16, TOL_BF16_OUT (helpers). A bf16 `dout` is an input: the reference gets the same
bf16-rounded values, so the float32 results keep TOL_F32_OP; the bf16 copy of dinp is the
float32 dinp rounded, TOL_BF16_OUT.
"""
import numpy as np
import pytest
from helpers import (BF16, REAL_SHAPES, TOL_F32_OP, assert_close, assert_output_close, bf16,
                     poisoned, randn, to_device_off_group)
from hypothesis import given
from hypothesis import strategies as st
from numba import cuda

from microgpt import reference as ref
from microgpt.kernels import layernorm
from microgpt.kernels.precision import GROUP, group_width

# (N, C) rows: tiny in the simulator (C above the block size too), andrea-120m's on a GPU
SIM_SHAPES = st.tuples(st.integers(1, 5), st.integers(1, 40))
# On a GPU the simulator's own shapes are drawn too: small sizes and edges where an
# out-of-range index shows in the simulator (IndexError) but passes unseen on a GPU
# unless compute-sanitizer watches.
if REAL_SHAPES:
    # a real-shape example costs seconds of host-side data and float64 reference
    SHAPES = st.one_of(st.just((16384, 768)),
                       st.tuples(st.integers(1, 16384), st.integers(1, 1536)), SIM_SHAPES)
    # the residual forward and the backward hold rows in registers: 256 threads at most
    BLOCKS = st.sampled_from([32, 128, 256])
    FORWARD_BLOCKS = st.sampled_from([32, 128, 256, 1024])
    ROWS_PER_BLOCK = st.integers(1, 64)
else:
    SHAPES = SIM_SHAPES
    # a warp per row: 2 and 3 warps leave some without a row in the last block
    BLOCKS = FORWARD_BLOCKS = st.sampled_from([32, 64, 96])
    ROWS_PER_BLOCK = st.integers(1, 3)
SEEDS = st.integers(0, 2**32 - 1)
DTYPES = st.sampled_from([np.float32, BF16])


def draw_rows(rng, N, C):
    """Rows with their own offset and spread, as a residual stream has. The spread stays
    well above the offset's float32 resolution: a nearly constant row is ill-conditioned
    for any float32 LayerNorm. So each row's noise is scaled to the drawn spread as its
    sample standard deviation: a few normal draws can by chance lie close together (two at
    0.012 apart on an offset of 4.1 left float32 the last 3 of its 7 digits)."""
    spread = rng.uniform(0.2, 5.0, (N, 1))
    noise = randn(rng, N, C).astype(np.float64)
    noise -= noise.mean(axis=1, keepdims=True)
    if C > 1:
        noise /= noise.std(axis=1, keepdims=True)
    return (noise * spread + randn(rng, N, 1, scale=2.0)).astype(np.float32)


def check_forward(shape, block, out_dtype, seed):
    N, C = shape
    rng = np.random.default_rng(seed)
    x, weight, bias = draw_rows(rng, N, C), randn(rng, C), randn(rng, C)
    out = cuda.to_device(poisoned((N, C), out_dtype))
    mean, rstd = cuda.to_device(poisoned(N)), cuda.to_device(poisoned(N))
    layernorm.layernorm_forward(out, mean, rstd, cuda.to_device(x), cuda.to_device(weight),
                                cuda.to_device(bias), block=block)
    want_out, want_mean, want_rstd = ref.layernorm_forward(x.astype(np.float64),
                                                           weight.astype(np.float64), bias)
    assert_output_close(out, want_out, "layernorm forward out")
    assert_close(mean.copy_to_host(), want_mean, TOL_F32_OP, "layernorm forward mean")
    assert_close(rstd.copy_to_host(), want_rstd, TOL_F32_OP, "layernorm forward rstd")


def check_residual_forward(shape, block, out_dtype, seed, place=cuda.to_device):
    """a is the residual stream (rows with their own offset and spread), b a block's
    branch at a scale of its own: the sum is what is normalised. place: how b goes to the
    device."""
    N, C = shape
    rng = np.random.default_rng(seed)
    a, b = draw_rows(rng, N, C), randn(rng, N, C, scale=rng.uniform(0.1, 3.0))
    weight, bias = randn(rng, C), randn(rng, C)
    resid, out = cuda.to_device(poisoned((N, C))), cuda.to_device(poisoned((N, C), out_dtype))
    mean, rstd = cuda.to_device(poisoned(N)), cuda.to_device(poisoned(N))
    layernorm.residual_layernorm_forward(resid, out, mean, rstd, cuda.to_device(a),
                                         place(b), cuda.to_device(weight),
                                         cuda.to_device(bias), block=block)
    want = ref.residual_layernorm_forward(a.astype(np.float64), b, weight.astype(np.float64),
                                          bias)
    assert_close(resid.copy_to_host(), want[0], TOL_F32_OP, "residual_layernorm resid")
    assert_output_close(out, want[1], "residual_layernorm out")
    assert_close(mean.copy_to_host(), want[2], TOL_F32_OP, "residual_layernorm mean")
    assert_close(rstd.copy_to_host(), want[3], TOL_F32_OP, "residual_layernorm rstd")


def check_backward(shape, block, rows_per_block, seed, dout_dtype=np.float32, copy=False,
                   place=cuda.to_device, sum_dinp=False, out_dtype=None):
    """dout_dtype bf16: the kernel reads bf16 dout, the reference the same values; copy:
    the kernel also writes dinp's new value in bf16; place: how dout goes to the device;
    sum_dinp: it also adds the new dinp's column sums into dinp_sum (a bias's gradient,
    accumulated: started from random values), float32 sums of float32 values, TOL_F32_OP;
    out_dtype (float32 or bf16): it also writes the forward's output, from the statistics
    and a bias (poisoned before)."""
    N, C = shape
    rng = np.random.default_rng(seed)
    x, weight, dy = draw_rows(rng, N, C), randn(rng, C), randn(rng, N, C)
    dy, dy64 = bf16(dy) if dout_dtype == BF16 else (dy, dy.astype(np.float64))
    x64 = x.astype(np.float64)
    bias = randn(rng, C)
    _, mean, rstd = ref.layernorm_forward(x64, weight.astype(np.float64), bias)
    # dinp, dweight, dbias, dinp_sum
    starts = randn(rng, N, C), randn(rng, C), randn(rng, C), randn(rng, C)
    dinp, dweight, dbias, dinp_sum = (cuda.to_device(s) for s in starts)
    dinp_copy = cuda.to_device(poisoned((N, C), BF16)) if copy else None
    out = cuda.to_device(poisoned((N, C), out_dtype)) if out_dtype else None
    mean32, rstd32 = mean.astype(np.float32), rstd.astype(np.float32)
    layernorm.layernorm_backward(
        dinp, dweight, dbias, place(dy), cuda.to_device(x), cuda.to_device(weight),
        cuda.to_device(mean32), cuda.to_device(rstd32),
        dinp_copy=dinp_copy, dinp_sum=dinp_sum if sum_dinp else None, out=out,
        bias=cuda.to_device(bias) if out_dtype else None, block=block,
        rows_per_block=rows_per_block)
    if out_dtype:       # from the very float32 statistics the kernel got
        assert_output_close(out, ref.layernorm_output(x64, weight.astype(np.float64), bias,
                                                      mean32.astype(np.float64), rstd32),
                            "layernorm backward out (the forward's, recomputed)")
    expected = ref.layernorm_backward(dy64, x64, weight.astype(np.float64), mean, rstd)
    for name, got, start, want in zip(("dinp", "dweight", "dbias"), (dinp, dweight, dbias),
                                      starts, expected):
        assert_close(got.copy_to_host(), start + want, TOL_F32_OP, f"layernorm backward {name}")
    if copy:
        assert_output_close(dinp_copy, starts[0] + expected[0], "layernorm backward dinp_copy")
    want_sum = starts[3] + ref.bias_backward(starts[0] + expected[0]) if sum_dinp else starts[3]
    assert_close(dinp_sum.copy_to_host(), want_sum, TOL_F32_OP, "layernorm backward dinp_sum")


@given(shape=SHAPES, block=FORWARD_BLOCKS, out_dtype=DTYPES, seed=SEEDS)
def test_layernorm_forward(shape, block, out_dtype, seed):
    check_forward(shape, block, out_dtype, seed)


@given(shape=SHAPES, block=BLOCKS, out_dtype=DTYPES, seed=SEEDS)
def test_residual_layernorm_forward(shape, block, out_dtype, seed):
    check_residual_forward(shape, block, out_dtype, seed)


@pytest.mark.parametrize("N", [layernorm.FEW_ROWS, layernorm.FEW_ROWS + 1])
def test_residual_layernorm_forward_of_few_rows_and_more(N):
    """A decoding step's rows (weight and bias loaded with the row) and one more (the
    training step's kernel), in the simulator too, whose drawn shapes have few rows."""
    check_residual_forward((N, 40), 128, BF16, N)


@given(shape=SHAPES, block=BLOCKS, rows_per_block=ROWS_PER_BLOCK, dout_dtype=DTYPES,
       copy=st.booleans(), sum_dinp=st.booleans(), out_dtype=st.sampled_from([None, np.float32, BF16]),
       seed=SEEDS)
def test_layernorm_backward_accumulates(shape, block, rows_per_block, dout_dtype, copy,
                                        sum_dinp, out_dtype, seed):
    check_backward(shape, block, rows_per_block, seed, dout_dtype, copy, sum_dinp=sum_dinp,
                   out_dtype=out_dtype)


def ones(*shape, dtype=np.float32):
    return cuda.to_device(np.ones(shape, dtype))


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
    """block=None as the model launches it, on rows wider than both defaults (256 threads
    forward, 128 backward)."""
    check_forward((2, 300), None, np.float32, seed=3)
    check_residual_forward((2, 300), None, BF16, seed=6)
    check_backward((2, 300), None, layernorm.ROWS_PER_BLOCK, seed=4)
    check_backward((2, 300), None, layernorm.ROWS_PER_BLOCK, 7, BF16, copy=True)
    check_backward((2, 300), None, layernorm.ROWS_PER_BLOCK, 8, BF16, copy=True,
                   sum_dinp=True, out_dtype=BF16)


@pytest.mark.parametrize("C,off_group,width", [(64, False, GROUP), (66, False, 1),
                                               (64, True, 1)])
def test_rows_in_groups_or_element_by_element(C, off_group, width):
    """Rows read in groups of 4 where they split into them (the model's), and one element
    at a time where C or an array's start does not; 2 warps of 1 and 2 rows each."""
    place = to_device_off_group if off_group else cuda.to_device
    assert group_width(C, place(np.ones((3, C), BF16))) == width
    check_residual_forward((3, C), 64, BF16, seed=C, place=place)
    check_backward((5, C), 64, 3, C, BF16, copy=True, place=place, sum_dinp=True,
                   out_dtype=BF16)


def test_backward_at_the_shared_memory_limit():
    """C = 6128: the block's dweight and dbias sums (49024 bytes) and the reduction's
    128-byte scratch fill the 48 KiB (49152 bytes) a block gets without an opt-in, exactly;
    one more column is refused. (At C = 6144 the sums alone fill 48 KiB: the H200 refused
    such a launch, CUDA_ERROR_INVALID_VALUE.)"""
    check_backward((1, 6128), None, 1, seed=5)
    wide, wide_vec = (cuda.to_device(np.ones(s, np.float32)) for s in ((1, 6129), (6129,)))
    stats = cuda.to_device(np.ones(1, np.float32))
    with pytest.raises(ValueError, match="C = 6129 needs 49032 bytes of shared memory"):
        layernorm.layernorm_backward(wide, wide_vec, wide_vec, wide, wide, wide_vec, stats,
                                     stats)
    # with dinp_sum, a third set of sums (12 bytes a column): 4086 columns do not fit;
    # 4084 (49008 bytes), the widest row in groups that does, runs (4085 fits too, read
    # element by element: 5x the simulator's 21 s)
    check_backward((1, 4084), None, 1, seed=6, sum_dinp=True)
    wide, wide_vec = ones(1, 4086), ones(4086)
    with pytest.raises(ValueError, match="C = 4086 needs 49032 bytes of shared memory"):
        layernorm.layernorm_backward(wide, wide_vec, wide_vec, wide, wide, wide_vec, stats,
                                     stats, dinp_sum=wide_vec)


def test_no_rows_launch_nothing(no_launches):
    """The empty-input rule (kernels/common.py): N = 0 is no launch, the accumulated
    dweight and dbias keep their values (a sum over no rows adds nothing)."""
    rows, stats = cuda.to_device(np.ones((0, 8), np.float32)), cuda.to_device(poisoned(0))
    vec_start = np.random.default_rng(0).standard_normal(8).astype(np.float32)
    vec = cuda.to_device(vec_start)
    layernorm.layernorm_forward(rows, stats, stats, rows, vec, vec)
    layernorm.residual_layernorm_forward(rows, rows, stats, stats, rows, rows, vec, vec)
    layernorm.layernorm_backward(rows, vec, vec, rows, rows, vec, stats, stats)
    np.testing.assert_array_equal(vec.copy_to_host(), vec_start)


# good shapes for (N, C) = (4, 8); each case changes some
GOOD = dict(out=(4, 8), dinp=(4, 8), dout=(4, 8), inp=(4, 8), weight=(8,), bias=(8,),
            dweight=(8,), dbias=(8,), dinp_sum=(8,), mean=(4,), rstd=(4,))
PASSES = ["forward", "residual", "backward"]


def launch(kind, block=None, rows_per_block=1, dtypes=None, **shapes):
    """kind in PASSES; dtypes {name: dtype} for arrays that are not float32. The residual
    forward takes inp's shape for a, b and resid."""
    a = {name: ones(*shape, dtype=(dtypes or {}).get(name, np.float32))
         for name, shape in {**GOOD, **shapes}.items()}
    if kind == "backward":
        layernorm.layernorm_backward(a["dinp"], a["dweight"], a["dbias"], a["dout"], a["inp"],
                                     a["weight"], a["mean"], a["rstd"],
                                     dinp_copy=a.get("dinp_copy"),
                                     dinp_sum=a["dinp_sum"],
                                     # the recomputed output only where the case gives it
                                     out=a["out"] if "out" in shapes else None,
                                     bias=a["bias"] if "bias" in shapes else None, block=block,
                                     rows_per_block=rows_per_block)
    elif kind == "residual":
        layernorm.residual_layernorm_forward(a.get("resid", a["inp"]), a["out"], a["mean"],
                                             a["rstd"], a["inp"], a.get("b", a["inp"]),
                                             a["weight"], a["bias"], block=block)
    else:
        layernorm.layernorm_forward(a["out"], a["mean"], a["rstd"], a["inp"], a["weight"],
                                    a["bias"], block=block)


@pytest.mark.parametrize("kind", PASSES)
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
def test_launchers_reject_bad_arguments(kind, changes, message):
    if kind == "residual":
        message = message.replace("inp:", "a:")
    with pytest.raises(ValueError, match=message):
        launch(kind, **changes)


@pytest.mark.parametrize("kind", ["residual", "backward"])
def test_rows_in_registers_refuse_blocks_above_256(kind):
    with pytest.raises(ValueError, match="block size must be at most 256 for a kernel that "
                                         "holds its rows in registers, got 288"):
        launch(kind, block=288)


@pytest.mark.parametrize("kind,changes,message", [
    ("forward", dict(out=(4, 7)), r"out: expected shape \(4, 8\)"),
    ("forward", dict(bias=(4,)), r"bias: expected shape \(8,\)"),
    ("residual", dict(out=(4, 7)), r"out: expected shape \(4, 8\)"),
    ("residual", dict(resid=(4, 7)), r"resid: expected shape \(4, 8\)"),
    ("residual", dict(b=(8, 4)), r"b: expected shape \(4, 8\)"),
    ("residual", dict(bias=(4,)), r"bias: expected shape \(8,\)"),
    ("backward", dict(dinp=(8, 4)), r"dinp: expected shape \(4, 8\)"),
    ("backward", dict(dout=(4,)), r"dout: expected shape \(4, 8\)"),
    ("backward", dict(dinp_copy=(4, 7)), r"dinp_copy: expected shape \(4, 8\)"),
    ("backward", dict(dweight=(4,)), r"dweight: expected shape \(8,\)"),
    ("backward", dict(dbias=(9,)), r"dbias: expected shape \(8,\)"),
    ("backward", dict(dinp_sum=(4,)), r"dinp_sum: expected shape \(8,\)"),
    ("backward", dict(out=(4, 7), bias=(8,)), r"out: expected shape \(4, 8\)"),
    ("backward", dict(out=(4, 8), bias=(7,)), r"bias: expected shape \(8,\)"),
    ("backward", dict(out=(4, 8)), "out and bias: give both"),
    ("backward", dict(rows_per_block=0), "rows_per_block must be at least 1, got 0"),
    ("backward", dict(rows_per_block=-1), "rows_per_block must be at least 1, got -1"),
])
def test_each_pass_rejects_its_own_bad_arguments(kind, changes, message):
    with pytest.raises(ValueError, match=message):
        launch(kind, **changes, dtypes=dict(dinp_copy=BF16))


@pytest.mark.parametrize("kind,name,dtype,message", [
    ("forward", "out", np.float64, "out: expected dtype float32 or bf16"),
    ("residual", "out", np.int16, "out: expected dtype float32 or bf16"),
    ("residual", "b", BF16, "b: expected dtype float32, got uint16"),
    ("residual", "resid", BF16, "resid: expected dtype float32, got uint16"),
    ("backward", "dout", np.float16, "dout: expected dtype float32 or bf16"),
    ("backward", "dinp", BF16, "dinp: expected dtype float32, got uint16"),
    ("backward", "dinp_copy", np.float32, "dinp_copy: expected dtype uint16, got float32"),
    ("backward", "inp", BF16, "inp: expected dtype float32, got uint16"),
])
def test_bf16_only_where_it_is_meant(kind, name, dtype, message):
    """bf16 is taken for the GEMM-facing arrays only: statistics, the residual stream and
    the accumulated gradients stay float32."""
    with pytest.raises(TypeError, match=message):
        launch(kind, dtypes={name: dtype}, **{name: GOOD.get(name, (4, 8))})
