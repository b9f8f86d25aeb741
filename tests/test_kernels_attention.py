"""The attention pipeline's kernels against the float64 reference: split / merge heads
(kernels/heads.py), causal attention (kernels/attention.py), and the five steps composed,
QKV GEMM -> split -> attention -> merge -> W_O GEMM, forward and backward."""
import numpy as np
import pytest
from helpers import ON_GPU, TOL_F32_OP, assert_close, poisoned, randn
from hypothesis import given
from hypothesis import strategies as st
from numba import cuda

from microgpt import reference as ref
from microgpt.kernels import attention, gemm, heads
from microgpt.kernels.common import ceil_div

SEEDS = st.integers(0, 2**32 - 1)
ANDREA_120M = (16, 12, 1024, 64)     # (B, H, T, D) of andrea-120m at full context
if ON_GPU:
    # each head_dim x block compiles three kernels, and the float64 reference of a full
    # andrea-120m attention takes seconds: a few real-shape examples
    HEAD_DIMS = st.sampled_from([4, 32, 64, 72])
    HEAD_SHAPES = st.tuples(st.integers(1, 16), st.integers(1, 12), st.integers(1, 1024),
                            HEAD_DIMS)
    # (128 rows of D = 64 would not fit the dk / dv kernel's shared memory)
    ATTENTION_BLOCKS = st.sampled_from([None, 32, 64])
    BLOCKS_PER_HEAD = st.sampled_from([None, 1, 3])
    COPY_BLOCKS = st.sampled_from([None, 32, 96, 1024])
    PIPELINE_SHAPES = HEAD_SHAPES
    # the defaults, as the model launches them
    PIPELINE_BLOCKS = dict(gemm_tile=None, copy_block=None, attention_block=None)
else:
    # simulated threads are slow: T <= 16 and D <= 16, or T <= 4 with the real head_dims
    HEAD_SHAPES = st.one_of(
        st.tuples(st.integers(1, 2), st.integers(1, 2), st.integers(1, 16), st.integers(1, 16)),
        st.tuples(st.just(1), st.just(1), st.integers(1, 4), st.sampled_from([32, 64, 72])))
    ATTENTION_BLOCKS = st.sampled_from([None, 1, 4, 8, 16, attention.ROWS])
    BLOCKS_PER_HEAD = st.sampled_from([None, 1, 2, 3])
    COPY_BLOCKS = st.sampled_from([None, 8, 32])
    PIPELINE_SHAPES = st.tuples(st.integers(1, 2), st.integers(1, 2), st.integers(1, 8),
                                st.integers(1, 8))
    # few idle simulated threads: the default blocks (256 threads) cost seconds here
    PIPELINE_BLOCKS = dict(gemm_tile=gemm.GemmTile(16, 16, 8, 4, 4), copy_block=16,
                           attention_block=8)


def to_device(*arrays):
    return [cuda.to_device(a) for a in arrays]


def host64(*arrays):
    return [a.astype(np.float64) for a in arrays]


# ----------------------------------------------------------------------------------
# split / merge heads: pure copies, so they must be exact

@given(shape=HEAD_SHAPES, block=COPY_BLOCKS, seed=SEEDS)
def test_split_heads(shape, block, seed):
    B, H, T, D = shape
    rng = np.random.default_rng(seed)
    qkv = randn(rng, B, T, 3 * H * D)
    q, k, v = to_device(*(poisoned((B, H, T, D)) for _ in range(3)))
    heads.split_heads_forward(q, k, v, cuda.to_device(qkv), block=block)
    for got, want in zip((q, k, v), ref.split_heads_forward(qkv, H)):
        np.testing.assert_array_equal(got.copy_to_host(), want)

    grads = [randn(rng, B, H, T, D) for _ in range(3)]
    dqkv = cuda.to_device(poisoned((B, T, 3 * H * D)))
    heads.split_heads_backward(dqkv, *to_device(*grads), block=block)
    np.testing.assert_array_equal(dqkv.copy_to_host(), ref.split_heads_backward(*grads))


@given(shape=HEAD_SHAPES, block=COPY_BLOCKS, seed=SEEDS)
def test_merge_heads(shape, block, seed):
    B, H, T, D = shape
    rng = np.random.default_rng(seed)
    y = randn(rng, B, H, T, D)
    out = cuda.to_device(poisoned((B, T, H * D)))
    heads.merge_heads_forward(out, cuda.to_device(y), block=block)
    np.testing.assert_array_equal(out.copy_to_host(), ref.merge_heads_forward(y))

    dout = randn(rng, B, T, H * D)
    dy = cuda.to_device(poisoned((B, H, T, D)))
    heads.merge_heads_backward(dy, cuda.to_device(dout), block=block)
    np.testing.assert_array_equal(dy.copy_to_host(), ref.merge_heads_backward(dout, H))


def test_heads_reject_bad_arguments():
    qkv = cuda.to_device(np.ones((2, 3, 10), np.float32))
    q = cuda.to_device(np.ones((2, 2, 3, 2), np.float32))
    with pytest.raises(ValueError, match="qkv: expected shape"):
        heads.split_heads_forward(q, q, q, qkv)
    with pytest.raises(ValueError, match="k: expected shape"):
        heads.split_heads_forward(q, cuda.to_device(np.ones((2, 2, 3, 1), np.float32)), q, qkv)
    with pytest.raises(ValueError, match="y: expected shape"):
        heads.merge_heads_forward(qkv, qkv)
    with pytest.raises(ValueError, match="block size"):
        heads.merge_heads_backward(q, cuda.to_device(np.ones((2, 3, 4), np.float32)), block=0)


# ----------------------------------------------------------------------------------
# attention

def check_attention_forward(shape, block, blocks_per_head, seed):
    rng = np.random.default_rng(seed)
    q, k, v = (randn(rng, *shape) for _ in range(3))
    out = cuda.to_device(poisoned(shape))
    lse = cuda.to_device(poisoned(shape[:3]))
    attention.attention_forward(out, lse, *to_device(q, k, v), block=block,
                                blocks_per_head=blocks_per_head)
    want_out, want_lse = ref.attention_forward(*host64(q, k, v))
    what = f"attention {shape} block={block} blocks_per_head={blocks_per_head}"
    assert_close(out.copy_to_host(), want_out, TOL_F32_OP, what + " out")
    assert_close(lse.copy_to_host(), want_lse, TOL_F32_OP, what + " lse")


def check_attention_backward(shape, block, blocks_per_head, seed):
    B, H, T, D = shape
    rng = np.random.default_rng(seed)
    q, k, v, dout = (randn(rng, *shape) for _ in range(4))
    # the forward's outputs as the kernel would have saved them, in float32
    out, lse = (x.astype(np.float32) for x in ref.attention_forward(*host64(q, k, v)))
    grads = to_device(*(poisoned(shape) for _ in range(3)))
    attention.attention_backward(*grads, *to_device(dout, q, k, v, out, lse), block=block,
                                 blocks_per_head=blocks_per_head)
    dq, dk, dv = (g.copy_to_host() for g in grads)
    want_dq, want_dk, want_dv = ref.attention_backward(*host64(dout, q, k, v, out, lse))
    what = f"attention backward {shape} block={block} blocks_per_head={blocks_per_head}"
    assert_close(dv, want_dv, TOL_F32_OP, what + " dv")
    if T > 1:
        assert_close(dq, want_dq, TOL_F32_OP, what + " dq")
        assert_close(dk, want_dk, TOL_F32_OP, what + " dk")
    else:
        # one key: out = v whatever q and k are, so dq = dk = 0 and a relative error is
        # undefined. What float32 leaves is rounding of dP - rowsum(dout * out), which
        # Cauchy-Schwarz bounds row by row by eps |dout| |v| |k| / sqrt(D) (|q| for dk).
        row_scale = np.linalg.norm(dout, axis=-1) * np.linalg.norm(v, axis=-1) / np.sqrt(D)
        for name, got, other in (("dq", dq, k), ("dk", dk, q)):
            bound = TOL_F32_OP * row_scale * np.linalg.norm(other, axis=-1)
            assert np.all(np.linalg.norm(got, axis=-1) <= bound), f"{what} {name}"


@given(shape=HEAD_SHAPES, block=ATTENTION_BLOCKS, blocks_per_head=BLOCKS_PER_HEAD, seed=SEEDS)
def test_attention_forward(shape, block, blocks_per_head, seed):
    check_attention_forward(shape, block, blocks_per_head, seed)


@given(shape=HEAD_SHAPES, block=ATTENTION_BLOCKS, blocks_per_head=BLOCKS_PER_HEAD, seed=SEEDS)
def test_attention_backward(shape, block, blocks_per_head, seed):
    check_attention_backward(shape, block, blocks_per_head, seed)


def test_attention_geometry():
    """Tiles fit the shared memory; the grid carries every (batch, head), and a head's row
    tiles go on the grid only while (B * H) blocks alone would leave the GPU idle."""
    for shared in (attention._forward_shared, attention._dq_shared, attention._dkdv_shared):
        for D in (4, 64, 72, 128):
            rows, tile, grid_x = attention._geometry(shared, D, 1024, 16 * 12, None, None)
            fixed, per_row = shared(D, rows)
            assert 1 <= tile <= attention.MAX_TILE
            assert fixed + tile * per_row <= attention.SHARED_FLOATS
            assert grid_x == ceil_div(1024, rows)     # 192 heads: every tile on the grid
        assert attention._geometry(shared, 64, 1024, attention.FULL_GRID_HEADS, None, None)[2] == 1
        assert attention._geometry(shared, 64, 100, 1, 32, 99)[2] == 4
        assert attention._geometry(shared, 16, 8, 1, None, None)[0] == 32


def test_attention_rejects_bad_arguments():
    x = cuda.to_device(np.ones((1, 2, 3, 4), np.float32))
    lse = cuda.to_device(np.ones((1, 2, 3), np.float32))
    with pytest.raises(ValueError, match="lse: expected shape"):
        attention.attention_forward(x, x, x, x, x)
    with pytest.raises(ValueError, match="v: expected shape"):
        attention.attention_forward(x, lse, x, x, cuda.to_device(np.ones((1, 2, 4, 4),
                                                                          np.float32)))
    with pytest.raises(ValueError, match="blocks_per_head"):
        attention.attention_forward(x, lse, x, x, x, blocks_per_head=0)
    wide = cuda.to_device(np.ones((1, 1, 2, 64), np.float32))
    with pytest.raises(ValueError, match="does not fit"):
        attention.attention_backward(*[wide] * 8, cuda.to_device(np.ones((1, 1, 2), np.float32)),
                                     block=1024)


# ----------------------------------------------------------------------------------
# the five steps composed

def pipeline_forward(x, w_qkv, w_o, n_head):
    """The float64 reference: x (B, T, C) -> projected attention output (B*T, C), and what
    the backward needs."""
    B, T, C = x.shape
    qkv = ref.matmul_forward(x.reshape(B * T, C), w_qkv).reshape(B, T, 3 * C)
    q, k, v = ref.split_heads_forward(qkv, n_head)
    att, lse = ref.attention_forward(q, k, v)
    merged = ref.merge_heads_forward(att).reshape(B * T, C)
    return ref.matmul_forward(merged, w_o), (q, k, v, att, lse, merged)


def pipeline_backward(dy, x, w_qkv, w_o, saved):
    """-> dx (B*T, C), dw_qkv (C, 3C), dw_o (C, C)."""
    q, k, v, att, lse, merged = saved
    B, H, T, D = q.shape
    dmerged, dw_o = ref.matmul_backward(dy, merged, w_o)
    datt = ref.merge_heads_backward(dmerged.reshape(B, T, H * D), H)
    dqkv = ref.split_heads_backward(*ref.attention_backward(datt, q, k, v, att, lse))
    dx, dw_qkv = ref.matmul_backward(dqkv.reshape(B * T, 3 * H * D), x.reshape(B * T, -1), w_qkv)
    return dx, dw_qkv, dw_o


def check_pipeline(shape, seed):
    B, H, T, D = shape
    C = H * D
    rng = np.random.default_rng(seed)
    x = randn(rng, B, T, C)
    w_qkv, w_o = randn(rng, C, 3 * C, scale=C ** -0.5), randn(rng, C, C, scale=C ** -0.5)
    dy = randn(rng, B * T, C)
    d_x, d_w_qkv, d_w_o, d_dy = to_device(x, w_qkv, w_o, dy)
    gemm_tile, copy_block, attention_block = PIPELINE_BLOCKS.values()

    # forward, every buffer poisoned first
    qkv = cuda.to_device(poisoned((B, T, 3 * C)))
    q, k, v, att, datt, dq, dk, dv = to_device(*(poisoned(shape) for _ in range(8)))
    lse = cuda.to_device(poisoned((B, H, T)))
    merged, y = to_device(poisoned((B, T, C)), poisoned((B * T, C)))
    gemm.matmul(qkv.reshape(B * T, 3 * C), d_x.reshape(B * T, C), d_w_qkv, tile=gemm_tile)
    heads.split_heads_forward(q, k, v, qkv, block=copy_block)
    attention.attention_forward(att, lse, q, k, v, block=attention_block)
    heads.merge_heads_forward(merged, att, block=copy_block)
    gemm.matmul(y, merged.reshape(B * T, C), d_w_o, tile=gemm_tile)

    want_y, saved = pipeline_forward(*host64(x, w_qkv, w_o), H)
    assert_close(y.copy_to_host(), want_y, TOL_F32_OP, f"pipeline {shape} forward")
    # the fused projection is the per-head one: head h of q is x @ W_qkv[:, h*D:(h+1)*D]
    x64, w64 = host64(x, w_qkv)
    q_host = q.copy_to_host()
    for h in range(H):
        assert_close(q_host[:, h], x64 @ w64[:, h * D:(h + 1) * D], TOL_F32_OP,
                     f"pipeline {shape} head {h}")

    # backward; the weight gradients accumulate into buffers that already hold values
    dmerged, dx = to_device(poisoned((B * T, C)), poisoned((B * T, C)))
    dw_qkv0, dw_o0 = randn(rng, C, 3 * C), randn(rng, C, C)
    dw_qkv, dw_o = to_device(dw_qkv0, dw_o0)
    gemm.matmul(dmerged, d_dy, d_w_o, transpose_b=True, tile=gemm_tile)
    gemm.matmul(dw_o, merged.reshape(B * T, C), d_dy, transpose_a=True, accumulate=True,
                tile=gemm_tile)
    heads.merge_heads_backward(datt, dmerged.reshape(B, T, C), block=copy_block)
    attention.attention_backward(dq, dk, dv, datt, q, k, v, att, lse, block=attention_block)
    heads.split_heads_backward(qkv, dq, dk, dv, block=copy_block)   # qkv now holds dqkv
    gemm.matmul(dx, qkv.reshape(B * T, 3 * C), d_w_qkv, transpose_b=True, tile=gemm_tile)
    gemm.matmul(dw_qkv, d_x.reshape(B * T, C), qkv.reshape(B * T, 3 * C), transpose_a=True,
                accumulate=True, tile=gemm_tile)

    want_dx, want_dw_qkv, want_dw_o = pipeline_backward(dy.astype(np.float64), x64, w64,
                                                        w_o.astype(np.float64), saved)
    assert_close(dx.copy_to_host(), want_dx, TOL_F32_OP, f"pipeline {shape} dx")
    assert_close(dw_qkv.copy_to_host(), want_dw_qkv + dw_qkv0, TOL_F32_OP,
                 f"pipeline {shape} dw_qkv")
    assert_close(dw_o.copy_to_host(), want_dw_o + dw_o0, TOL_F32_OP, f"pipeline {shape} dw_o")


@given(shape=PIPELINE_SHAPES, seed=SEEDS)
def test_pipeline_matches_reference(shape, seed):
    check_pipeline(shape, seed)


@pytest.mark.skipif(not ON_GPU, reason="andrea-120m's shapes need a GPU")
def test_andrea_120m_attention_layer():
    """The model's own shapes, whatever Hypothesis draws: attention forward and backward
    and the composed pipeline at (B, H, T, D) = (16, 12, 1024, 64), default geometry."""
    check_attention_forward(ANDREA_120M, None, None, seed=0)
    check_attention_backward(ANDREA_120M, None, None, seed=1)
    check_pipeline(ANDREA_120M, seed=2)
