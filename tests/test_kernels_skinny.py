"""Products of few rows (kernels/skinny.py, a decoding step's GEMMs) against the float64
reference, in every mix of float32 and bf16 operands, with and without the GELU epilogue."""
import numpy as np
import pytest
from helpers import BF16, ON_GPU, TOL_BF16_OUT, TOL_F32_OP, assert_close, bf16, from_bf16, \
    poisoned, randn
from hypothesis import given
from hypothesis import strategies as st
from numba import cuda

from microgpt import reference as ref
from microgpt.kernels.gemm import skinny

SEEDS = st.integers(0, 2**32 - 1)
DTYPES = st.sampled_from([np.float32, BF16])
if ON_GPU:      # andrea-120m's decoding products, and sizes that end tiles mid-way
    M_S = st.integers(1, skinny.ROWS)
    SIZES = st.one_of(st.sampled_from([(768, 2304), (768, 768), (768, 3072), (3072, 768),
                                       (768, 50304)]),
                      st.tuples(st.integers(1, 1000), st.integers(1, 1000)))
else:
    M_S = st.integers(1, 3)     # and 16 rows below
    SIZES = st.tuples(st.integers(1, 24), st.one_of(st.integers(1, 20), st.integers(129, 133)))


def device(x, dtype):
    if dtype == BF16:
        bits, values = bf16(x)
        return cuda.to_device(bits), values
    return cuda.to_device(x), x.astype(np.float64)


def assert_result(out, want, what):
    got = out.copy_to_host()
    if got.dtype == BF16:
        assert_close(from_bf16(got), want, TOL_BF16_OUT, what + " (bf16)")
    else:
        assert_close(got, want, TOL_F32_OP, what)


@given(M=M_S, size=SIZES, transpose_b=st.booleans(), gelu=st.booleans(),
       dtypes=st.tuples(DTYPES, DTYPES, DTYPES), seed=SEEDS)
def test_skinny_matmul(M, size, transpose_b, gelu, dtypes, seed):
    K, N = size
    gelu = gelu and not transpose_b
    out_dtype, a_dtype, b_dtype = dtypes
    rng = np.random.default_rng(seed)
    a, a64 = device(randn(rng, M, K), a_dtype)
    b, b64 = device(randn(rng, *((N, K) if transpose_b else (K, N))), b_dtype)
    out = cuda.to_device(poisoned((M, N), out_dtype))
    pre = cuda.to_device(poisoned((M, N), out_dtype)) if gelu else None
    skinny.skinny_matmul(out, a, b, transpose_b, gelu_pre=pre)
    product = ref.matmul_forward(a64, b64.T if transpose_b else b64)
    if gelu:
        assert_result(pre, product, "the product before GELU")
        assert_result(out, ref.gelu_forward(product), "GELU of the product")
    else:
        assert_result(out, product, "the product")


def test_the_splits_add_up_the_same_bits_every_launch():
    """The last block of a column tile adds the splits in order and resets its ticket: a
    second launch gives the same bits (as a replayed graph must)."""
    rng = np.random.default_rng(5)
    x, w = randn(rng, skinny.ROWS, 40), randn(rng, 40, 9)      # 16 rows, 40 // 8 splits
    a, b = cuda.to_device(x), cuda.to_device(w)
    outs = []
    for _ in range(2):
        out = cuda.to_device(poisoned((skinny.ROWS, 9)))
        skinny.skinny_matmul(out, a, b)
        outs.append(out.copy_to_host())
    np.testing.assert_array_equal(outs[0], outs[1])
    assert_close(outs[0], x.astype(np.float64) @ w, TOL_F32_OP, "product")


@pytest.mark.parametrize("M, transpose_b, gelu, message", [
    (0, False, False, "1 to 16 rows"), (17, False, False, "1 to 16 rows"),
    (2, True, True, "the up projection's"),
])
def test_bad_products_are_refused(M, transpose_b, gelu, message):
    a, b = cuda.device_array((M, 4), np.float32), cuda.device_array((4, 4), np.float32)
    out = cuda.device_array((M, 4), np.float32)
    with pytest.raises(ValueError, match=message):
        skinny.skinny_matmul(out, a, b, transpose_b, gelu_pre=out if gelu else None)


@pytest.mark.parametrize("M", [1, skinny.ROWS, skinny.ROWS + 1])
def test_the_router_sends_few_rows_here_on_a_gpu(M, monkeypatch):
    """gemm.matmul hands a product of at most ROWS rows to skinny on a GPU (a decoding
    step's), and keeps to the float32 kernel in the simulator and above ROWS rows."""
    from microgpt.kernels import gemm
    sent = []
    monkeypatch.setattr(skinny, "skinny_matmul", lambda *args, **kw: sent.append(args))
    rng = np.random.default_rng(M)
    a, b = (rng.standard_normal(shape).astype(np.float32) for shape in ((M, 8), (8, 4)))
    out = cuda.to_device(np.full((M, 4), np.nan, np.float32))
    gemm.matmul(out, cuda.to_device(a), cuda.to_device(b))
    assert len(sent) == (1 if ON_GPU and M <= skinny.ROWS else 0)
    if not sent:
        assert_close(out.copy_to_host(), a.astype(np.float64) @ b, TOL_F32_OP, "out")



# (transpose_b, gelu, out dtype, M, K, N, unroll): 16 rows and fewer; K ending a k-block
# (16) or a head's chunk (64) mid-way, with several splits on the GPU; N ending a warp's 64
# columns (or a head's 8) mid-way; on the GPU every count of k-blocks a warp loads at once
# that a bench times (one split or several at K 768; the head has no such count). The
# simulator's mma costs a block barrier and a whole warp's product per lane: there, one
# small product of each kind.
MMA_CASES = ([(False, False, np.float32, 16, 40, 72), (False, True, BF16, 3, 24, 8),
              (True, False, BF16, 16, 72, 24)] if not ON_GPU else
             [(tb, gelu, out, M, K, N) for tb, gelu, out in ((False, False, np.float32),
                                                             (False, True, BF16),
                                                             (True, False, BF16))
              for M, K, N in ((16, 768, 2304), (1, 3072, 768), (7, 776, 200))])
MMA_CASES = [case + (unroll,) for case in MMA_CASES
             for unroll in ((2, 3, 6) if ON_GPU and not case[0] else (skinny.MMA_UNROLL,))]


@pytest.mark.parametrize("transpose_b, gelu, out_dtype, M, K, N, unroll", MMA_CASES)
def test_the_tensor_cores_take_bf16_products(transpose_b, gelu, out_dtype, M, K, N, unroll,
                                             monkeypatch):
    """bf16 a and b go to the mma kernels (rows padded to 16 with zeros, K and N cut
    mid-tile), against the float64 product of the same bf16 values; on the GPU, whose
    products have several splits, a second launch gives the same bits (the splits added
    in order, the tickets reset)."""
    monkeypatch.setattr(skinny, "MMA_UNROLL", unroll)
    monkeypatch.setattr(skinny, "MMA_UNROLL_MANY", unroll)
    rng = np.random.default_rng(M * K + N)
    a, a64 = device(randn(rng, M, K), BF16)
    b, b64 = device(randn(rng, *((N, K) if transpose_b else (K, N))), BF16)
    assert skinny._on_tensor_cores(a, b, K, N, transpose_b)
    got = []
    for _ in range(2 if ON_GPU else 1):
        out = cuda.to_device(poisoned((M, N), out_dtype))
        pre = cuda.to_device(poisoned((M, N), BF16)) if gelu else None
        skinny.skinny_matmul(out, a, b, transpose_b, gelu_pre=pre)
        got.append(out.copy_to_host())
    np.testing.assert_array_equal(got[0], got[-1])
    product = ref.matmul_forward(a64, b64.T if transpose_b else b64)
    if gelu:
        assert_result(pre, product, "the product before GELU")
        assert_result(out, ref.gelu_forward(product), "GELU of the product")
    else:
        assert_result(out, product, "the product")



def test_the_cuda_cores_kernels_compile_per_power_of_two_of_rows():
    assert [skinny.row_bound(M) for M in range(1, 17)] == [1, 2, 4, 4] + [8] * 4 + [16] * 8


@pytest.mark.skipif(not ON_GPU, reason="the simulator compiles nothing; its mma cases above "
                    "run rows 3 and 16 through the one kernel")
def test_one_compilation_serves_every_row_count(monkeypatch):
    """The tensor cores' kernels read the row count at run time: products of 1, 5 and 16
    rows are right (out holds M rows exactly: a write past them fails) and add no
    overload to the kernel's first (every row count on one unroll here)."""
    monkeypatch.setattr(skinny, "MANY_ROWS", skinny.ROWS + 1)
    K, N = 776, 200
    rng = np.random.default_rng(K)
    b, b64 = device(randn(rng, K, N), BF16)
    kernel = skinny._skinny_mma_kernel(False, skinny.MMA_UNROLL)
    compiled = None
    for M in (1, 5, 16):
        a, a64 = device(randn(rng, M, K), BF16)
        out = cuda.to_device(poisoned((M, N)))
        skinny.skinny_matmul(out, a, b)
        assert_result(out, ref.matmul_forward(a64, b64), f"the product of {M} rows")
        compiled = len(kernel.overloads) if compiled is None else compiled
        assert len(kernel.overloads) == compiled, f"{M} rows compiled again"
