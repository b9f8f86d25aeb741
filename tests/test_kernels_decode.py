"""The decoding kernels against the float64 reference (kernels/decode.py): the embedding at
each sequence's position, the prefill's cache write, a step's attention against the cache."""
import numpy as np
import pytest
from helpers import (BF16, ON_GPU, TOL_BF16_OUT, TOL_F32_OP, assert_close, bf16, from_bf16,
                     poisoned, randn)
from hypothesis import given
from hypothesis import strategies as st
from numba import cuda

from microgpt import reference as ref
from microgpt.kernels.attention import decode

SEEDS = st.integers(0, 2**32 - 1)
DTYPES = st.sampled_from([np.float32, BF16])
if ON_GPU:      # andrea-120m's decoding (12 heads of 64, 1024 positions), and small sizes
    B_S, H_S, D_S = st.integers(1, 16), st.integers(1, 12), st.sampled_from([1, 4, 32, 64, 72])
    S_S = st.one_of(st.just(1024), st.integers(1, 300))
    BLOCKS = st.sampled_from([None, 96, 128, 256])
else:
    B_S, H_S, D_S = st.integers(1, 3), st.integers(1, 2), st.integers(1, 8)
    S_S = st.integers(1, 40)
    BLOCKS = st.sampled_from([None, 32])


def states(rng, B, S, V):
    """seq (B, 4): random tokens at random positions of a cache of S, one sequence past it
    when B > 1 (its step must change nothing)."""
    seq = np.zeros((B, len(ref.SEQ_COLUMNS)), np.int32)
    seq[:, ref.TOKEN] = rng.integers(0, V, B)
    seq[:, ref.POSITION] = rng.integers(0, S, B)
    seq[:, ref.LEFT] = rng.integers(1, 5, B)
    if B > 1:
        seq[rng.integers(B), ref.POSITION] = S
    return seq


def device(x, dtype):
    """A float32 host array on the device as dtype -> (device array, its values in float64)."""
    if dtype == BF16:
        bits, values = bf16(x)
        return cuda.to_device(bits), values
    return cuda.to_device(x.astype(np.float32)), x.astype(np.float64)


def host(arr):
    got = arr.copy_to_host()
    return from_bf16(got) if got.dtype == BF16 else got.astype(np.float64)


@given(B=B_S, C=st.integers(1, 40), S=st.integers(1, 12), V=st.integers(1, 30), seed=SEEDS)
def test_decode_embedding(B, C, S, V, seed):
    rng = np.random.default_rng(seed)
    seq, wte, wpe = states(rng, B, S, V), randn(rng, V, C), randn(rng, S, C)
    out = cuda.to_device(poisoned((B, 1, C)))
    decode.decode_embedding(out, cuda.to_device(seq), cuda.to_device(wte), cuda.to_device(wpe))
    np.testing.assert_array_equal(out.copy_to_host(), ref.decode_embedding(seq, wte, wpe))


@given(B=B_S, H=H_S, D=D_S, S=S_S, dtype=DTYPES, data=st.data(), seed=SEEDS)
def test_kv_cache_write(B, H, D, S, dtype, data, seed):
    """The prefill's rows land in their slots at positions 0 .. T-1; every other row and
    position of the cache keeps its bits."""
    C, rng = H * D, np.random.default_rng(seed)
    T = data.draw(st.integers(1, min(S, 300 if ON_GPU else 4)), label="T")
    slots = data.draw(st.permutations(range(B)), label="slots")[:data.draw(
        st.integers(1, B), label="n")]
    qkv, _ = device(randn(rng, len(slots), T, 3 * C), dtype)
    kv, _ = device(randn(rng, B, S, 2 * C), dtype)
    want = ref.kv_cache_write(kv.copy_to_host(), qkv.copy_to_host(), np.array(slots))
    decode.kv_cache_write(kv, qkv, cuda.to_device(np.array(slots, np.int32)))
    np.testing.assert_array_equal(kv.copy_to_host(), want)


@given(B=B_S, H=H_S, D=D_S, S=S_S, dtype=DTYPES, block=BLOCKS, seed=SEEDS)
def test_attention_decode(B, H, D, S, dtype, block, seed):
    """Against the reference on the same (rounded) values. The cache is NaN from each
    sequence's position on, so a read of the new position from the cache instead of qkv,
    or of any later one, fails; out is poisoned, and a sequence past the cache must leave
    its out row as it was (NaN) and its cache untouched."""
    check_attention_decode(B, H, D, S, dtype, block, seed)


@pytest.mark.skipif(not ON_GPU, reason="andrea-120m's shapes: a GPU's")
@pytest.mark.parametrize("block", [128, 256])
def test_attention_decode_at_andrea_120m(block):
    """Each split size a bench times, at andrea-120m's 12 heads of 64 and 1024 positions
    in bf16, 16 sequences at positions drawn across one split, two and more."""
    check_attention_decode(16, 12, 64, 1024, BF16, block, block)


def check_attention_decode(B, H, D, S, dtype, block, seed):
    C, rng = H * D, np.random.default_rng(seed)
    if block is not None and block < D:
        block = None
    seq = states(rng, B, S, 1)
    cache = randn(rng, B, S, 2 * C)
    for b, pos in enumerate(seq[:, ref.POSITION]):
        cache[b, pos:] = np.nan
    kv, kv64 = device(cache, dtype)
    qkv, qkv64 = device(randn(rng, B, 1, 3 * C), dtype)
    out = cuda.to_device(poisoned((B, 1, C), dtype))
    kwargs = {} if block is None else {"block": block}
    decode.attention_decode(out, kv, qkv, cuda.to_device(seq), H, **kwargs)
    rows, want_cache = ref.attention_decode(kv64, qkv64, seq, H)
    got, got_cache = host(out), host(kv)
    active = [b for b, row in enumerate(rows) if row is not None]
    tol = TOL_BF16_OUT if dtype == BF16 else TOL_F32_OP
    if active:
        assert_close(got[active], np.array([rows[b] for b in active]), tol, "attention")
    for b in set(range(B)) - set(active):
        assert np.isnan(got[b]).all(), "a sequence past the cache wrote its output"
    np.testing.assert_array_equal(got_cache, want_cache)     # NaN where NaN, bits elsewhere


def test_the_splits_combine_the_same_bits_every_launch():
    """The last split to finish combines them all in split order and resets the tickets:
    a second launch on the same inputs gives the same bits (as a replayed graph must)."""
    rng = np.random.default_rng(3)
    B, H, D, S = 2, 2, 4, 70                       # three splits of 32 keys
    seq = np.array([[0, 69, 1, 0], [0, 40, 1, 0]], np.int32)
    kv = cuda.to_device(randn(rng, B, S, 2 * H * D))
    qkv = cuda.to_device(randn(rng, B, 1, 3 * H * D))
    outs = []
    for _ in range(2):
        out = cuda.to_device(poisoned((B, 1, H * D)))
        decode.attention_decode(out, kv, qkv, cuda.to_device(seq), H, block=32)
        outs.append(out.copy_to_host())
    np.testing.assert_array_equal(outs[0], outs[1])
    assert np.isfinite(outs[0]).all()


@pytest.mark.parametrize("n_head, block, cache_shape, message", [
    (3, None, (1, 4, 8), "n_head 3 does not divide d_model 4"),
    (1, 48, (1, 4, 8), "block size must be a multiple of 32"),
    (1, 32, (1, 4, 6), r"kv_cache: expected shape \(1, 4, 8\)"),
])
def test_bad_attention_launches_are_refused(n_head, block, cache_shape, message):
    qkv, kv = cuda.to_device(np.ones((1, 1, 12), np.float32)), cuda.device_array(cache_shape,
                                                                                 np.float32)
    out, seq = cuda.device_array((1, 1, 4), np.float32), cuda.to_device(np.zeros((1, 4), np.int32))
    kwargs = {} if block is None else {"block": block}
    with pytest.raises(ValueError, match=message):
        decode.attention_decode(out, kv, qkv, seq, n_head, **kwargs)


def test_a_block_below_head_dim_is_refused():
    qkv, kv = cuda.device_array((1, 1, 120), np.float32), cuda.device_array((1, 2, 80), np.float32)
    out = cuda.device_array((1, 1, 40), np.float32)
    seq = cuda.to_device(np.zeros((1, 4), np.int32))
    with pytest.raises(ValueError, match="block 32 is below head_dim 40"):
        decode.attention_decode(out, kv, qkv, seq, 1, block=32)


def test_a_prefill_longer_than_the_cache_is_refused():
    qkv, kv = cuda.device_array((1, 5, 12), np.float32), cuda.device_array((1, 4, 8), np.float32)
    with pytest.raises(ValueError, match="5 positions do not fit in a cache of 4"):
        decode.kv_cache_write(kv, qkv, cuda.to_device(np.zeros(1, np.int32)))


def test_an_empty_batch_launches_nothing(no_launches):
    kv, seq = cuda.device_array((0, 4, 8), np.float32), cuda.device_array((0, 4), np.int32)
    decode.attention_decode(cuda.device_array((0, 1, 4), np.float32), kv,
                            cuda.device_array((0, 1, 12), np.float32), seq, 2)
    decode.kv_cache_write(cuda.device_array((1, 4, 8), np.float32),
                          cuda.device_array((0, 2, 12), np.float32),
                          cuda.device_array((0,), np.int32))
    decode.decode_embedding(cuda.device_array((0, 1, 4), np.float32), seq,
                            cuda.device_array((3, 4), np.float32),
                            cuda.device_array((4, 4), np.float32))
