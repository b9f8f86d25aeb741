"""The GEMM kernel (kernels/gemm/) against a float64 matmul: every transpose and
accumulate combination, edge tiles, tile overrides, and the model's real shapes on a GPU."""
import numpy as np
import pytest
from helpers import (ON_GPU, REAL_SHAPES, TOL_BF16_OUT, TOL_F32_OP, assert_close, bf16,
                     from_bf16, poisoned, randn)
from hypothesis import Phase, example, given, settings
from hypothesis import strategies as st
from numba import cuda

from microgpt import reference as ref
from microgpt.kernels import gemm
from microgpt.kernels.gemm import fp32
from microgpt.kernels.gemm.fp32 import GemmTile

# (M, N, K, transpose_a, transpose_b, accumulate) as the model calls it, andrea-120m
# (B*T = 16384 token rows, C = 768, V = 50304)
MODEL_PRODUCTS = [
    (16384, 2304, 768, False, False, False),     # fused QKV: X @ W_qkv
    (16384, 768, 2304, False, True, False),      # dX = dqkv @ W_qkv^T
    (768, 2304, 16384, True, False, True),       # dW_qkv += X^T @ dqkv
    (768, 768, 16384, True, False, True),        # dW_O
    (16384, 768, 3072, False, False, False),     # MLP projection
    (16384, 50304, 768, False, True, False),     # logits = x @ wte^T
    (16384, 768, 50304, False, False, False),    # dx = dlogits @ wte
    (50304, 768, 16384, True, False, True),      # dwte += dlogits^T @ x
]
FLAGS = st.tuples(st.booleans(), st.booleans(), st.booleans())
# a few simulated threads per block; every size straddles a tile edge now and then
SIM_SIZES = st.tuples(st.integers(1, 20), st.integers(1, 20), st.integers(1, 24))
SIM_TILES = [GemmTile(8, 8, 4, 2, 2), GemmTile(16, 8, 4, 4, 2), GemmTile(8, 16, 8, 2, 4),
             GemmTile(4, 4, 4, 1, 1)]
# On a GPU the simulator's own shapes are drawn too: small sizes and edges where an
# out-of-range index shows in the simulator (IndexError) but passes unseen on a GPU
# unless compute-sanitizer watches.
if REAL_SHAPES:
    SIZES = st.one_of(st.tuples(st.integers(1, 16384), st.integers(1, 3072),
                                st.integers(1, 3072)), SIM_SIZES)
    # None takes each default tile on the model's products; one odd override besides
    TILES = st.sampled_from([None, GemmTile(64, 32, 16, 4, 2)] + SIM_TILES)
else:
    SIZES = SIM_SIZES
    TILES = st.sampled_from(SIM_TILES)
PRODUCTS = SIZES.flatmap(lambda mnk: FLAGS.map(lambda flags: mnk + flags))
SEEDS = st.integers(0, 2**32 - 1)
# the MLP's token rows and width C (its hidden width 4C)
GELU_ROWS = st.integers(1, 4096) if REAL_SHAPES else st.integers(1, 16)
GELU_WIDTHS = st.sampled_from([384, 768]) if REAL_SHAPES else st.integers(1, 8)
SMALL_SIM_TILE = GemmTile(4, 4, 4, 1, 1)      # 16 simulated threads


def check_matmul(M, N, K, transpose_a, transpose_b, accumulate, tile, seed, views=False):
    """views: a and b are views of some of wider matrices' columns (every other one, from
    a drawn first), the values beside them drawn too."""
    rng = np.random.default_rng(seed)
    a, d_a = operand(rng, *((K, M) if transpose_a else (M, K)), views)
    b, d_b = operand(rng, *((N, K) if transpose_b else (K, N)), views)
    out0 = randn(rng, M, N) if accumulate else poisoned((M, N))
    out = cuda.to_device(out0)
    gemm.matmul(out, d_a, d_b, transpose_a, transpose_b, accumulate, tile=tile)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    expected = (a64.T if transpose_a else a64) @ (b64.T if transpose_b else b64)
    if accumulate:
        expected += out0
    assert_close(out.copy_to_host(), expected, TOL_F32_OP,
                 f"matmul {M}x{N}x{K} ta={transpose_a} tb={transpose_b} acc={accumulate} {tile}"
                 f" views={views}")


def operand(rng, rows, cols, view):
    """A float32 operand and its device array: a matrix of its own, or a view of every
    other column of a wider one from column `first` on."""
    if not view:
        values = randn(rng, rows, cols)
        return values, cuda.to_device(values)
    first = int(rng.integers(0, 3))
    wide = randn(rng, rows, first + 2 * cols + int(rng.integers(0, 3)))
    return wide[:, first:first + 2 * cols:2], cuda.to_device(wide)[:, first:first + 2 * cols:2]


@given(product=PRODUCTS, tile=TILES, views=st.booleans(), seed=SEEDS)
def test_matmul_matches_reference(product, tile, views, seed):
    check_matmul(*product, tile, seed, views)


@given(sizes=SIZES, tile=TILES, seed=SEEDS)
def test_a_bias_is_added_to_every_row(sizes, tile, seed):
    """X @ W + bias (GPT-2's linear layers), the bias added in the epilogue."""
    M, N, K = sizes
    rng = np.random.default_rng(seed)
    x, w, bias = randn(rng, M, K), randn(rng, K, N), randn(rng, N)
    out = cuda.to_device(poisoned((M, N)))
    gemm.matmul(out, cuda.to_device(x), cuda.to_device(w), bias=cuda.to_device(bias), tile=tile)
    assert_close(out.copy_to_host(), x.astype(np.float64) @ w + bias, TOL_F32_OP,
                 f"matmul + bias {M}x{N}x{K} {tile}")


@pytest.mark.skipif(not REAL_SHAPES, reason="the model's products need a GPU and real shapes")
@pytest.mark.parametrize("product", MODEL_PRODUCTS)
def test_model_products(product):
    """Each product of an andrea-120m step, with the tile the launcher picks."""
    check_matmul(*product, None, seed=11)


def check_gelu_products(dtype, fused, rows, width, seed, biased=False):
    """The MLP's GEMMs with GELU against float64, fc = x @ w_fc (+ b_fc where biased)
    written too, every output poisoned first."""
    rng = np.random.default_rng(seed)
    N, C = rows, width
    x, w_fc, w_proj, dy = (randn(rng, *shape) for shape in ((N, C), (C, 4 * C), (4 * C, C),
                                                            (N, C)))
    b_fc = randn(rng, 4 * C) if biased else None
    if dtype == "bf16":
        (x, x64), (w_fc, w_fc64), (w_proj, w_proj64), (dy, dy64) = map(bf16, (x, w_fc, w_proj,
                                                                              dy))
        # TOL_GELU_BACKWARD of test_kernels_gemm_bf16.py: the wgmma epilogue rounds gelu',
        # the GEMM before the GELU kernel rounds the product
        out_dtype, read, tol, tol_backward = np.uint16, from_bf16, TOL_BF16_OUT, 2.0**-7 + 3e-5
    else:
        x64, w_fc64, w_proj64, dy64 = (v.astype(np.float64) for v in (x, w_fc, w_proj, dy))
        out_dtype, read, tol, tol_backward = np.float32, np.asarray, TOL_F32_OP, TOL_F32_OP
    fc, fc_gelu = (cuda.to_device(poisoned((N, 4 * C), out_dtype)) for _ in range(2))
    gemm.matmul_gelu_forward(fc_gelu, fc, cuda.to_device(x), cuda.to_device(w_fc),
                             None if b_fc is None else cuda.to_device(b_fc), fused=fused)
    stored = read(fc.copy_to_host())
    assert_close(stored, x64 @ w_fc64 + (0.0 if b_fc is None else b_fc), tol,
                 f"fc ({dtype}, biased {biased})")
    assert_close(read(fc_gelu.copy_to_host()), ref.gelu_forward(stored), tol, f"gelu ({dtype})")
    dfc = cuda.to_device(poisoned((N, 4 * C), out_dtype))
    # where biased, b_fc's gradient too: dbias started from random values += dfc's column
    # sums (of the float32 values before a bf16 dfc's rounding: each within tol_backward
    # of the reference's, so their sums are)
    start = randn(rng, 4 * C)
    dbias = cuda.to_device(start) if biased else None
    # and gelu(fc) recomputed, the down projection's dW operand (as the model asks)
    act = cuda.to_device(poisoned((N, 4 * C), out_dtype))
    gemm.matmul_gelu_backward(dfc, cuda.to_device(dy), cuda.to_device(w_proj), fc,
                              dbias=dbias, act=act, fused=fused)
    want = ref.gelu_backward(dy64 @ w_proj64.T, stored)
    assert_close(read(dfc.copy_to_host()), want, tol_backward, f"dfc ({dtype})")
    assert_close(read(act.copy_to_host()), ref.gelu_forward(stored), tol,
                 f"gelu recomputed ({dtype}, biased {biased}, fused {fused})")
    if biased:
        assert_close(dbias.copy_to_host(), start + ref.bias_backward(want), tol_backward,
                     f"b_fc's gradient ({dtype}, fused {fused})")


# The products in the simulator fit one output tile of each GEMM (rows <= 16, width <= 8):
# every drawn example runs the same kernel variants, at ~7 s of simulation in bf16, but
# a width of 8 gives bf16 rows of whole 16-byte chunks (the aligned variant). So there the
# tests take an aligned and an unaligned product always, and two drawn ones; a GPU draws
# the profile's examples besides.
GELU_EXAMPLES = settings(max_examples=settings().max_examples if ON_GPU else 2)


def gelu_examples(test):
    return example(rows=16, width=8, seed=1)(example(rows=5, width=3, seed=2)(test))


@pytest.mark.parametrize("dtype, fused", [("float32", None), ("bf16", False)])
@GELU_EXAMPLES
@gelu_examples
@given(rows=GELU_ROWS, width=GELU_WIDTHS, seed=SEEDS)
def test_gelu_products_in_either_precision(dtype, fused, rows, width, seed):
    """float32 operands take this family's GEMM and the GELU kernels; bf16 ones the
    tensor-core GEMM and the GELU kernels (its fused GELU epilogues: the next test)."""
    check_gelu_products(dtype, fused, rows, width, seed)


@pytest.mark.parametrize("dtype, fused", [("float32", None), ("bf16", False), ("bf16", True)])
@(settings() if ON_GPU else settings(phases=[Phase.explicit]))
@example(rows=5, width=3, seed=3)
@given(rows=GELU_ROWS, width=GELU_WIDTHS, seed=SEEDS)
def test_the_mlp_up_projection_adds_its_bias_before_the_gelu(dtype, fused, rows, width, seed):
    """GPT-2's c_fc: the bias in the GEMM's epilogue (the fused GELU epilogue's too), then
    the GELU of the sum; backward, the bias's gradient beside dfc (in the simulator one
    product each: the bias's epilogues and the sums have tests of their own)."""
    check_gelu_products(dtype, fused, rows, width, seed, biased=True)


# The simulator has no wgmma, and without it gemm.matmul_gelu_* take the unfused route
# (the GEMM and then the GELU kernel): the launches of fused=False above. There this
# checks that route, on the two given products alone; the wgmma epilogues' twins are
# tested with every wgmma tile in test_kernels_gemm_bf16.py. On a GPU it runs the wgmma
# epilogues, on the profile's examples.
FUSED_GELU_EXAMPLES = settings() if ON_GPU else settings(phases=[Phase.explicit])


@FUSED_GELU_EXAMPLES
@gelu_examples
@given(rows=GELU_ROWS, width=GELU_WIDTHS, seed=SEEDS)
def test_fused_gelu_products(rows, width, seed):
    """bf16 operands with the GELU in the tensor-core GEMM's epilogues."""
    check_gelu_products("bf16", True, rows, width, seed)


@pytest.mark.parametrize("tile", [fp32.LARGE_TILE, fp32.MEDIUM_TILE, fp32.SMALL_TILE])
def test_default_tiles(tile):
    """The tiles the GPU runs by default, once each in the simulator too (odd edges)."""
    check_matmul(tile.rows + 3, tile.cols - 5, 11, True, False, True, tile, seed=7)


def test_default_tile_fills_the_gpu():
    assert fp32.default_tile(16384, 2304) == fp32.LARGE_TILE
    assert fp32.default_tile(768, 2304) == fp32.MEDIUM_TILE
    assert fp32.default_tile(768, 768) == fp32.SMALL_TILE


def test_a_tile_of_1024_threads():
    """The most threads a block may have: accepted, and it computes (one launch of 1024
    simulated threads, a second or two)."""
    tile = GemmTile(32, 32, 32, 1, 1)
    assert tile.threads == 1024
    check_matmul(5, 9, 40, False, True, False, tile, seed=3)


def test_an_empty_inner_dimension_writes_zeros():
    """The empty-input rule (kernels/common.py): a product over K = 0 is a zero matrix,
    written over what out held (or added to it: nothing)."""
    rng = np.random.default_rng(2)
    out = cuda.to_device(poisoned((3, 5)))
    empty_a, empty_b = cuda.to_device(np.ones((3, 0), np.float32)), cuda.to_device(
        np.ones((0, 5), np.float32))
    gemm.matmul(out, empty_a, empty_b, tile=SMALL_SIM_TILE)
    np.testing.assert_array_equal(out.copy_to_host(), np.zeros((3, 5), np.float32))
    start = randn(rng, 3, 5)
    out = cuda.to_device(start)
    gemm.matmul(out, empty_a, empty_b, accumulate=True, tile=SMALL_SIM_TILE)
    np.testing.assert_array_equal(out.copy_to_host(), start)


@pytest.mark.parametrize("M,N", [(0, 5), (3, 0), (0, 0)])
def test_an_empty_output_launches_nothing(M, N, no_launches):
    """The empty-input rule (kernels/common.py): no element of out, no launch, no error."""
    out = cuda.to_device(np.ones((M, N), np.float32))
    gemm.matmul(out, cuda.to_device(np.ones((M, 4), np.float32)),
                cuda.to_device(np.ones((4, N), np.float32)))


@pytest.mark.parametrize("field", GemmTile._fields)
@pytest.mark.parametrize("value", [0, -4])
def test_matmul_rejects_a_tile_with_a_field_below_one(field, value):
    """A zero depth would divide by zero in the kernel, a zero thread_rows in the check."""
    x = cuda.to_device(np.ones((4, 3), np.float32))
    tile = GemmTile(8, 8, 4, 2, 2)._replace(**{field: value})
    with pytest.raises(ValueError, match="must be positive multiples"):
        gemm.matmul(cuda.to_device(np.ones((4, 4), np.float32)), x, x, transpose_b=True,
                    tile=tile)


def test_matmul_rejects_bad_arguments():
    x = cuda.to_device(np.ones((4, 3), np.float32))
    w = cuda.to_device(np.ones((3, 5), np.float32))
    out = cuda.to_device(np.ones((4, 5), np.float32))
    with pytest.raises(ValueError, match="b: expected shape"):
        gemm.matmul(out, x, w, transpose_b=True)
    for name, args in (("out", (cuda.to_device(np.ones(20, np.float32)), x, w)),
                       ("a", (out, cuda.to_device(np.ones((4, 3, 1), np.float32)), w)),
                       ("b", (out, x, cuda.to_device(np.ones(15, np.float32))))):
        with pytest.raises(ValueError, match=f"{name}: expected a 2-D matrix"):
            gemm.matmul(*args)
    with pytest.raises(ValueError, match=r"a: expected shape \(4, 4\), got \(4, 3\)"):
        gemm.matmul(out, x, w, transpose_a=True)
    with pytest.raises(ValueError, match=r"b: expected shape \(3, 5\)"):
        gemm.matmul(out, x, cuda.to_device(np.ones((4, 5), np.float32)))
    with pytest.raises(TypeError, match="out: expected dtype float32"):
        gemm.matmul(cuda.to_device(np.ones((4, 5), np.float64)), x, w)
    with pytest.raises(TypeError, match="a: expected dtype float32"):
        gemm.matmul(out, cuda.to_device(np.ones((4, 3), np.float64)), w)
    with pytest.raises(TypeError, match="expected a device array"):
        gemm.matmul(out, np.ones((4, 3), np.float32), w)
    with pytest.raises(ValueError, match="out: expected a C-contiguous array"):
        gemm.matmul(cuda.to_device(np.ones((4, 10), np.float32))[:, ::2], x, w)
    with pytest.raises(ValueError, match="thread_rows"):
        gemm.matmul(out, x, w, tile=GemmTile(8, 8, 4, 3, 2))
    with pytest.raises(ValueError, match="more than 1024"):
        gemm.matmul(out, x, w, tile=GemmTile(64, 64, 8, 1, 2))
    with pytest.raises(ValueError, match="1056 threads per block, more than 1024"):
        gemm.matmul(out, x, w, tile=GemmTile(33, 32, 32, 1, 1))
    with pytest.raises(ValueError, match="multiples of the"):
        gemm.matmul(out, x, w, tile=GemmTile(8, 8, 1, 1, 1))
