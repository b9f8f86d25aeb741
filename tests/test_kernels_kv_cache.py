"""The KV cache kernels against the float64 reference (kernels/attention/kv_cache.py)."""
import numpy as np
import pytest
from helpers import ON_GPU, TOL_F32_OP, assert_close, poisoned, randn
from hypothesis import given
from hypothesis import strategies as st
from numba import cuda

from microgpt import reference as ref
from microgpt.kernels.attention import kv_cache

SEEDS = st.integers(0, 2**32 - 1)
if ON_GPU:      # andrea-120m's decoding (12 heads of 64, 1024 positions), and the small sizes
    B_S, H_S, D_S = st.integers(1, 4), st.integers(1, 12), st.sampled_from([1, 4, 32, 64, 72])
    S_S = st.one_of(st.just(1024), st.integers(1, 300))
    BLOCKS = st.sampled_from([None, 96, 256, 1024])
else:
    B_S, H_S, D_S, S_S = st.integers(1, 2), st.integers(1, 2), st.integers(1, 8), st.integers(1, 6)
    BLOCKS = st.sampled_from([None, 32])


@st.composite
def cache_shapes(draw):
    """(B, H, D, S, T, start): T new positions from start in a cache of S."""
    B, H, D, S = draw(B_S), draw(H_S), draw(D_S), draw(S_S)
    T = draw(st.integers(1, min(S, 4 if not ON_GPU else S)))
    start = draw(st.integers(0, S - T))
    return B, H, D, S, T, start


def draw_cache(rng, B, C, S, T, start):
    """A cache of fresh draws up to the new rows; the new rows and those after them are
    NaN, so a kernel that reads a key it must not (or misses a write) fails."""
    kv = randn(rng, B, S, 2 * C)
    kv[:, start:] = np.nan
    return kv


@given(shape=cache_shapes(), seed=SEEDS)
def test_kv_cache_write(shape, seed):
    B, H, D, S, T, start = shape
    C = H * D
    rng = np.random.default_rng(seed)
    qkv, kv = randn(rng, B, T, 3 * C), draw_cache(rng, B, C, S, T, start)
    kv[:, start + T:] = randn(rng, B, S - start - T, 2 * C)      # rows after: kept as they are
    d_kv = cuda.to_device(kv)
    kv_cache.kv_cache_write(d_kv, cuda.to_device(qkv), start)
    want = kv.copy()
    want[:, start:start + T] = ref.kv_cache_rows(qkv)
    np.testing.assert_array_equal(d_kv.copy_to_host(), want)


@given(shape=cache_shapes(), block=BLOCKS, seed=SEEDS)
def test_attention_cached_forward(shape, block, seed):
    B, H, D, S, T, start = shape
    C = H * D
    if block is not None and block < D:
        block = None
    rng = np.random.default_rng(seed)
    qkv, kv = randn(rng, B, T, 3 * C), draw_cache(rng, B, C, S, T, start)
    kv[:, start:start + T] = ref.kv_cache_rows(qkv)
    out = cuda.to_device(poisoned((B, T, C)))
    kv_cache.attention_cached_forward(out, cuda.to_device(qkv), cuda.to_device(kv), start, H,
                                      block=block)
    want = ref.attention_cached_forward(qkv.astype(np.float64), kv.astype(np.float64), start, H)
    assert_close(out.copy_to_host(), want, TOL_F32_OP, "attention against the cache")


def test_an_unwritten_cache_row_fails_the_attention():
    """The poisoning above catches a read beyond the causal horizon: the same call with the
    new rows left unwritten (NaN) returns NaN."""
    rng = np.random.default_rng(0)
    qkv, kv = randn(rng, 1, 1, 6), draw_cache(rng, 1, 2, 3, 1, 1)
    out = cuda.to_device(poisoned((1, 1, 2)))
    kv_cache.attention_cached_forward(out, cuda.to_device(qkv), cuda.to_device(kv), 1, 1)
    assert np.isnan(out.copy_to_host()).all()


@pytest.mark.parametrize("start, n_head, block, message", [
    (3, 1, None, "do not fit in a cache of 4"),
    (-1, 1, None, "do not fit"),
    (0, 3, None, "n_head 3 does not divide d_model 4"),
    (0, 1, 48, "block size must be a multiple of 32"),
])
def test_bad_launches_are_refused(start, n_head, block, message):
    qkv, kv = cuda.to_device(np.ones((1, 2, 12), np.float32)), cuda.device_array((1, 4, 8), np.float32)
    out = cuda.device_array((1, 2, 4), np.float32)
    with pytest.raises(ValueError, match=message):
        kv_cache.attention_cached_forward(out, qkv, kv, start, n_head, block=block)


def test_a_block_below_head_dim_is_refused():
    qkv, kv = cuda.device_array((1, 1, 120), np.float32), cuda.device_array((1, 2, 80), np.float32)
    out = cuda.device_array((1, 1, 40), np.float32)
    with pytest.raises(ValueError, match="block 32 is below head_dim 40"):
        kv_cache.attention_cached_forward(out, qkv, kv, 0, 1, block=32)


def test_no_new_positions_launch_nothing(no_launches):
    qkv, kv = cuda.device_array((1, 0, 12), np.float32), cuda.device_array((1, 4, 8), np.float32)
    kv_cache.kv_cache_write(kv, qkv, 2)
    kv_cache.attention_cached_forward(cuda.device_array((1, 0, 4), np.float32), qkv, kv, 2, 2)
