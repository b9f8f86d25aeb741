"""The attention pipeline's kernels against the float64 reference: split / merge heads
(kernels/attention/heads.py), causal attention (kernels/attention/), and the five steps
composed, QKV GEMM -> split -> attention -> merge -> W_O GEMM, forward and backward."""
import functools

import ml_dtypes
import numpy as np
import pytest
from helpers import (BF16, REAL_SHAPES, TOL_F32_OP, assert_close, assert_attention_gradients,
                     bf16, from_bf16, poisoned, randn)
from hypothesis import given
from hypothesis import strategies as st
from numba import cuda

from microgpt import reference as ref
from microgpt.kernels import attention, gemm
from microgpt.kernels.attention import fp32, heads
from microgpt.kernels.gemm.fp32 import GemmTile
from microgpt.kernels.common import ceil_div

SEEDS = st.integers(0, 2**32 - 1)
# T past one staged tile (MAX_TILE rows of the other side), so that every kernel stages a
# second tile over the first: what the end-of-tile barriers guard. D = 1, 4, 16 keep the
# score scale 1/sqrt(D) a power of two (see WIDE_SPREAD). Cheap enough for both profiles,
# and on a GPU these are the shapes whose out-of-range indexing the simulator catches.
MULTI_TILE_SHAPES = st.tuples(st.just(1), st.just(1),
                              st.integers(fp32.MAX_TILE + 1, fp32.MAX_TILE + 8),
                              st.sampled_from([1, 4, 16]))
MULTI_TILE_BLOCKS = st.sampled_from([None, 8, 16])
# q and k drawn as integers of this spread: the scores then spread over hundreds, so an
# online softmax that rescales by the wrong maximum overflows float32's exp (past 88),
# while every score is exact in float32 and the float64 reference stays within 1e-5
WIDE_SPREAD = 16.0
ANDREA_120M = (16, 12, 1024, 64)     # (B, H, T, D) of andrea-120m at full context
# simulated threads are slow: T <= 16 and D <= 16, or T <= 4 with the real head_dims
SIM_HEAD_SHAPES = st.one_of(
    st.tuples(st.integers(1, 2), st.integers(1, 2), st.integers(1, 16), st.integers(1, 16)),
    st.tuples(st.just(1), st.just(1), st.integers(1, 4), st.sampled_from([32, 64, 72])))
# On a GPU the simulator's own shapes are drawn too: small sizes and edges where an
# out-of-range index shows in the simulator (IndexError) but passes unseen on a GPU
# unless compute-sanitizer watches.
if REAL_SHAPES:
    # each head_dim x block compiles three kernels, and the float64 reference of a full
    # andrea-120m attention takes seconds: a few real-shape examples
    HEAD_DIMS = st.sampled_from([4, 32, 64, 72])
    HEAD_SHAPES = st.one_of(st.tuples(st.integers(1, 16), st.integers(1, 12),
                                      st.integers(1, 1024), HEAD_DIMS), SIM_HEAD_SHAPES)
    # (128 rows of D = 64 would not fit the dk / dv kernel's shared memory)
    ATTENTION_BLOCKS = st.sampled_from([None, 1, 8, 32, 64])
    BLOCKS_PER_HEAD = st.sampled_from([None, 1, 3])
    COPY_BLOCKS = st.sampled_from([None, 8, 32, 96, 1024])
    PIPELINE_SHAPES = HEAD_SHAPES
    # the defaults, as the model launches them
    PIPELINE_BLOCKS = dict(gemm_tile=None, copy_block=None, attention_block=None)
else:
    HEAD_SHAPES = SIM_HEAD_SHAPES
    ATTENTION_BLOCKS = st.sampled_from([None, 1, 4, 8, 16, fp32.ROWS])
    BLOCKS_PER_HEAD = st.sampled_from([None, 1, 2, 3])
    COPY_BLOCKS = st.sampled_from([None, 8, 32])
    PIPELINE_SHAPES = st.tuples(st.integers(1, 2), st.integers(1, 2), st.integers(1, 8),
                                st.integers(1, 8))
    # few idle simulated threads: the default blocks (256 threads) cost seconds here
    PIPELINE_BLOCKS = dict(gemm_tile=GemmTile(16, 16, 8, 4, 4), copy_block=16,
                           attention_block=8)


def to_device(*arrays):
    return [cuda.to_device(a) for a in arrays]


def host64(*arrays):
    return [a.astype(np.float64) for a in arrays]


# ----------------------------------------------------------------------------------
# split / merge heads: pure copies, so they must be exact; any array may be bf16, and a
# float32 value copied into bf16 is rounded once to nearest even, as ml_dtypes rounds
# (exact equality with that is stronger than TOL_BF16_OUT, which it implies)

DTYPES = st.sampled_from([np.float32, BF16])


def device_copy_input(x, dtype):
    """-> (x as a device array of dtype, the values it holds in float32)."""
    if dtype == BF16:
        bits, _ = bf16(x)
        return cuda.to_device(bits), from_bf16(bits).astype(np.float32)
    return cuda.to_device(x), x


def assert_copied(out, want, what):
    """out (a device array, float32 or bf16) holds want (float32), rounded as out holds it."""
    got = out.copy_to_host()
    if got.dtype == BF16:
        want = want.astype(ml_dtypes.bfloat16).view(BF16)
    np.testing.assert_array_equal(got, want, err_msg=what)


@given(shape=HEAD_SHAPES, block=COPY_BLOCKS, fused_dtype=DTYPES,
       head_dtypes=st.tuples(DTYPES, DTYPES, DTYPES), seed=SEEDS)
def test_split_heads(shape, block, fused_dtype, head_dtypes, seed):
    B, H, T, D = shape
    rng = np.random.default_rng(seed)
    qkv, qkv32 = device_copy_input(randn(rng, B, T, 3 * H * D), fused_dtype)
    q, k, v = (cuda.to_device(poisoned(shape, dtype)) for dtype in head_dtypes)
    heads.split_heads_forward(q, k, v, qkv, block=block)
    for name, got, want in zip("qkv", (q, k, v), ref.split_heads_forward(qkv32, H)):
        assert_copied(got, want, f"split {name}")

    grads = [device_copy_input(randn(rng, B, H, T, D), dtype) for dtype in head_dtypes]
    dqkv = cuda.to_device(poisoned((B, T, 3 * H * D), fused_dtype))
    heads.split_heads_backward(dqkv, *(g for g, _ in grads), block=block)
    assert_copied(dqkv, ref.split_heads_backward(*(g32 for _, g32 in grads)), "dqkv")


@pytest.mark.parametrize("dtype", [np.float32, BF16])
@pytest.mark.parametrize("offset", [1, 2])
def test_split_heads_of_a_view_that_starts_mid_word(dtype, offset):
    """One dtype throughout is copied in words of up to 8 bytes (4 bf16 or 2 float32):
    a qkv that starts offset elements into its allocation is not aligned to them, and is
    copied in the widest word it is aligned to."""
    B, H, T, D = 1, 2, 3, 4
    rng = np.random.default_rng(offset)
    flat, flat32 = device_copy_input(randn(rng, offset + B * T * 3 * H * D), dtype)
    qkv, qkv32 = flat[offset:].reshape(B, T, 3 * H * D), flat32[offset:].reshape(B, T, -1)
    q, k, v = (cuda.to_device(poisoned((B, H, T, D), dtype)) for _ in range(3))
    heads.split_heads_forward(q, k, v, qkv)
    for name, got, want in zip("qkv", (q, k, v), ref.split_heads_forward(qkv32, H)):
        assert_copied(got, want, f"split {name}")


@given(shape=HEAD_SHAPES, block=COPY_BLOCKS, fused_dtype=DTYPES, head_dtype=DTYPES,
       seed=SEEDS)
def test_merge_heads(shape, block, fused_dtype, head_dtype, seed):
    B, H, T, D = shape
    rng = np.random.default_rng(seed)
    y, y32 = device_copy_input(randn(rng, B, H, T, D), head_dtype)
    out = cuda.to_device(poisoned((B, T, H * D), fused_dtype))
    heads.merge_heads_forward(out, y, block=block)
    assert_copied(out, ref.merge_heads_forward(y32), "merge")

    dout, dout32 = device_copy_input(randn(rng, B, T, H * D), fused_dtype)
    dy = cuda.to_device(poisoned(shape, head_dtype))
    heads.merge_heads_backward(dy, dout, block=block)
    assert_copied(dy, ref.merge_heads_backward(dout32, H), "merge backward")


@given(shape=HEAD_SHAPES, parts=st.sampled_from([1, 3]), seed=SEEDS)
def test_heads_views_are_what_the_copies_copy(shape, parts, seed):
    """backend.heads_view, which the bf16 step gives attention instead of the copies: on
    NumPy the view of each part of fused rows is what split (three parts) or merge
    backward (one) copies out, the fused rows' own memory (a write through it lands
    there); on the cuda backend the view of the same device rows has that shape and those
    strides from that part's first element (flash attention's tests run it, views in)."""
    from microgpt.backend import NumpyBackend
    from microgpt.cuda_backend import CudaBackend
    from microgpt.kernels.common import device_address

    B, H, T, D = shape
    fused = randn(np.random.default_rng(seed), B, T, parts * H * D)
    want = (ref.split_heads_forward(fused, H) if parts == 3 else
            (ref.merge_heads_backward(fused, H),))
    rows = cuda.to_device(fused)
    for part in range(parts):
        view = NumpyBackend().heads_view(fused, part, H, D)
        np.testing.assert_array_equal(view, want[part], err_msg=f"part {part}")
        assert np.shares_memory(view, fused)
        on_device = CudaBackend().heads_view(rows, part, H, D)
        assert (on_device.shape, on_device.strides) == (view.shape, view.strides)
        assert device_address(on_device) == device_address(rows) + part * H * D * 4


def ones(*shape, dtype=np.float32):
    return cuda.to_device(np.ones(shape, dtype))


# the four copies, on good arguments for (B, H, T, D) = (2, 2, 3, 2): (launcher, the
# names of its per-head arrays, its fused array's name, that array's width)
COPIES = [(heads.split_heads_forward, ("q", "k", "v"), "qkv", 12),
          (heads.split_heads_backward, ("dq", "dk", "dv"), "dqkv", 12),
          (heads.merge_heads_forward, ("y",), "out", 4),
          (heads.merge_heads_backward, ("dy",), "dout", 4)]


def copy_call(launch, head_names, fused_name, width, block=None, **changes):
    arrays = {name: ones(2, 2, 3, 2) for name in head_names}
    arrays[fused_name] = ones(2, 3, width)
    arrays.update(changes)
    fused = arrays.pop(fused_name)
    if launch in (heads.split_heads_forward, heads.merge_heads_backward):
        launch(*arrays.values(), fused, block=block)
    else:
        launch(fused, *arrays.values(), block=block)


@pytest.mark.parametrize("launch,head_names,fused_name,width", COPIES)
def test_heads_reject_bad_arguments(launch, head_names, fused_name, width):
    """Every check of every copy: the rank, shape and dtype of each per-head array, the
    fused array's shape, dtype and residence, the block size; bf16 taken for any array."""
    call = functools.partial(copy_call, launch, head_names, fused_name, width)
    first = head_names[0]
    with pytest.raises(ValueError, match=rf"{first}: expected shape \(B, H, T, D\)"):
        call(**{first: ones(2, 3, 2)})
    for name in head_names[1:]:
        with pytest.raises(ValueError, match=rf"{name}: expected shape \(2, 2, 3, 2\)"):
            call(**{name: ones(2, 2, 3, 1)})
    with pytest.raises(ValueError, match=rf"{fused_name}: expected shape \(2, 3, {width}\)"):
        call(**{fused_name: ones(2, 3, width + 1)})
    with pytest.raises(TypeError, match=rf"{fused_name}: expected dtype float32 or bf16 "
                       r"\(a uint16 array\), got float64"):
        call(**{fused_name: ones(2, 3, width, dtype=np.float64)})
    for name in head_names:
        with pytest.raises(TypeError, match=f"{name}: expected dtype float32 or bf16"):
            call(**{name: ones(2, 2, 3, 2, dtype=np.float16)})
        call(**{name: ones(2, 2, 3, 2, dtype=BF16)})
    call(**{fused_name: ones(2, 3, width, dtype=BF16)})
    with pytest.raises(TypeError, match=f"{first}: expected a device array"):
        call(**{first: np.ones((2, 2, 3, 2), np.float32)})
    for block in (0, 1025):
        with pytest.raises(ValueError, match="block size"):
            call(block=block)


@pytest.mark.parametrize("shape", [(1, 2, 0, 4), (0, 2, 3, 4)])
def test_heads_of_an_empty_batch_launch_nothing(shape, no_launches):
    """The empty-input rule (kernels/common.py), with bf16 and float32 arrays mixed."""
    B, H, T, D = shape
    per_head = [cuda.to_device(np.ones(shape, dtype)) for dtype in (BF16, np.float32, BF16)]
    qkv = cuda.to_device(np.ones((B, T, 3 * H * D), BF16))
    merged = cuda.to_device(np.ones((B, T, H * D), np.float32))
    heads.split_heads_forward(*per_head, qkv)
    heads.split_heads_backward(qkv, *per_head)
    heads.merge_heads_forward(merged, per_head[0])
    heads.merge_heads_backward(per_head[0], merged)


# ----------------------------------------------------------------------------------
# attention

def check_attention_forward(shape, block, blocks_per_head, seed, spread=None):
    """spread: None for normal q and k, else integer-valued q and k of that spread."""
    rng = np.random.default_rng(seed)
    q, k, v = (randn(rng, *shape) for _ in range(3))
    if spread is not None:
        q, k = (np.round(x * np.float32(spread)) for x in (q, k))
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
    outputs = to_device(*(poisoned(shape) for _ in range(3)), poisoned(shape[:3]))
    attention.attention_backward(*outputs, *to_device(dout, q, k, v, out, lse), block=block,
                                 blocks_per_head=blocks_per_head)
    dout64, q64, k64, v64, out64, lse64 = host64(dout, q, k, v, out, lse)
    want = (*ref.attention_backward(dout64, q64, k64, v64, out64, lse64),
            ref.attention_delta(dout64, out64))
    what = f"attention backward {shape} block={block} blocks_per_head={blocks_per_head}"
    assert_attention_gradients([x.copy_to_host() for x in outputs], want, dout, q, k, v,
                               TOL_F32_OP, TOL_F32_OP, what)


@given(shape=HEAD_SHAPES, block=ATTENTION_BLOCKS, blocks_per_head=BLOCKS_PER_HEAD, seed=SEEDS)
def test_attention_forward(shape, block, blocks_per_head, seed):
    check_attention_forward(shape, block, blocks_per_head, seed)


@given(shape=HEAD_SHAPES, block=ATTENTION_BLOCKS, blocks_per_head=BLOCKS_PER_HEAD, seed=SEEDS)
def test_attention_backward(shape, block, blocks_per_head, seed):
    check_attention_backward(shape, block, blocks_per_head, seed)


@given(shape=MULTI_TILE_SHAPES, block=MULTI_TILE_BLOCKS, blocks_per_head=st.sampled_from([None, 1]),
       seed=SEEDS)
def test_attention_stages_several_tiles(shape, block, blocks_per_head, seed):
    """Two staged tiles of keys (forward, dq) and of queries (dk, dv): a missing end-of-tile
    barrier lets a thread restage a tile that others still read. The forward's scores
    spread wide (WIDE_SPREAD), so its running maximum must be right, not only consistent."""
    check_attention_forward(shape, block, blocks_per_head, seed, spread=WIDE_SPREAD)
    check_attention_backward(shape, block, blocks_per_head, seed)


def test_attention_geometry():
    """Tiles fit the shared memory; the grid carries every (batch, head), and a head's row
    tiles go on the grid only while (B * H) blocks alone would leave the GPU idle."""
    for shared in (fp32._forward_shared, fp32._dq_shared, fp32._dkdv_shared):
        for D in (4, 64, 72, 128):
            rows, tile, grid_x = fp32._geometry(shared, D, 1024, 16 * 12, None, None)
            fixed, per_row = shared(D, rows)
            assert 1 <= tile <= fp32.MAX_TILE
            assert fixed + tile * per_row <= fp32.SHARED_FLOATS
            assert grid_x == ceil_div(1024, rows)     # 192 heads: every tile on the grid
        assert fp32._geometry(shared, 64, 1024, fp32.FULL_GRID_HEADS, None, None)[2] == 1
        assert fp32._geometry(shared, 64, 100, 1, 32, 99)[2] == 4
        assert fp32._geometry(shared, 16, 8, 1, None, None)[0] == 32


@pytest.mark.parametrize("shared", [fp32._forward_shared, fp32._dq_shared,
                                    fp32._dkdv_shared])
@pytest.mark.parametrize("D", [1, 4, 16, 32, 64, 72, 128, 200])
@pytest.mark.parametrize("block", [None, 32, 64])
def test_attention_tiles_fit_48_kib(shared, D, block):
    """The staged tile is the longest that fits 48 KiB, the static shared memory a block
    gets without an opt-in, written here as a number (not the module's constant, which
    would pass a miscounted budget): one more staged row would not fit."""
    try:
        rows, tile, _ = fp32._geometry(shared, D, 1024, 1, block, None)
    except ValueError as error:            # not even one row fits at this block size
        assert "does not fit" in str(error)
        fixed, per_row = shared(D, block)
        assert (fixed + per_row) * 4 > 49152
        return
    fixed, per_row = shared(D, rows)
    assert 1 <= tile <= fp32.MAX_TILE
    assert (fixed + tile * per_row) * 4 <= 49152
    assert tile == fp32.MAX_TILE or (fixed + (tile + 1) * per_row) * 4 > 49152


HEADS_ARGS = dict(q=(1, 2, 3, 4), k=(1, 2, 3, 4), v=(1, 2, 3, 4), out=(1, 2, 3, 4),
                  lse=(1, 2, 3), dout=(1, 2, 3, 4), dq=(1, 2, 3, 4), dk=(1, 2, 3, 4),
                  dv=(1, 2, 3, 4), delta=(1, 2, 3))


def attention_call(backward, **changes):
    """attention_forward or _backward on good (1, 2, 3, 4) arguments but for changes."""
    names = ("dq", "dk", "dv", "delta", "dout", "q", "k", "v", "out", "lse") if backward else \
        ("out", "lse", "q", "k", "v")
    args = {name: ones(*HEADS_ARGS[name]) for name in names}
    options = {key: changes.pop(key) for key in ("block", "blocks_per_head") if key in changes}
    args.update(changes)
    launch = attention.attention_backward if backward else attention.attention_forward
    launch(*args.values(), **options)


@pytest.mark.parametrize("backward", [False, True])
@pytest.mark.parametrize("changes,error,message", [
    (dict(q=ones(2, 3, 4)), ValueError, r"q: expected shape \(B, H, T, D\)"),
    (dict(lse=ones(1, 2, 4)), ValueError, r"lse: expected shape \(1, 2, 3\)"),
    (dict(k=ones(1, 2, 4, 4)), ValueError, r"k: expected shape \(1, 2, 3, 4\)"),
    (dict(v=ones(1, 2, 3, 4, dtype=np.float64)), TypeError, "v: expected dtype float32"),
    (dict(out=np.ones((1, 2, 3, 4), np.float32)), TypeError, "out: expected a device array"),
    (dict(block=0), ValueError, "block size"),
    (dict(block=1025), ValueError, "block size"),
    (dict(blocks_per_head=0), ValueError, "blocks_per_head must be at least 1, got 0"),
    (dict(q=ones(1, 2, 3, 0), k=ones(1, 2, 3, 0), v=ones(1, 2, 3, 0),
          out=ones(1, 2, 3, 0), dout=ones(1, 2, 3, 0), dq=ones(1, 2, 3, 0),
          dk=ones(1, 2, 3, 0), dv=ones(1, 2, 3, 0)),
     ValueError, "head_dim must be at least 1, got 0"),
])
def test_attention_rejects_bad_arguments(backward, changes, error, message):
    if not backward:
        changes = {k: v for k, v in changes.items() if k not in ("dout", "dq", "dk", "dv")}
    with pytest.raises(error, match=message):
        attention_call(backward, **changes)


def test_attention_rejects_backward_only_arguments():
    with pytest.raises(ValueError, match=r"dq: expected shape \(1, 2, 3, 4\)"):
        attention_call(True, dq=ones(1, 2, 3, 5))
    with pytest.raises(ValueError, match=r"dout: expected shape \(1, 2, 3, 4\)"):
        attention_call(True, dout=ones(1, 1, 3, 4))
    with pytest.raises(ValueError, match=r"delta: expected shape \(1, 2, 3\)"):
        attention_call(True, delta=ones(1, 2, 3, 4))
    wide, rows3 = ones(1, 1, 2, 64), ones(1, 1, 2)
    with pytest.raises(ValueError, match="does not fit"):
        attention.attention_backward(*[wide] * 3, rows3, *[wide] * 5, rows3, block=1024)


@pytest.mark.parametrize("shape", [(1, 2, 0, 4), (0, 2, 3, 4), (1, 0, 3, 4)])
def test_attention_of_an_empty_batch_launches_nothing(shape, no_launches):
    """The empty-input rule (kernels/common.py): no rows, no launch, no error."""
    marker = np.float32(7.0)
    lse = cuda.to_device(np.full(shape[:3], marker))
    tensors = [cuda.to_device(np.full(shape, marker)) for _ in range(8)]
    attention.attention_forward(tensors[0], lse, *tensors[1:4])
    attention.attention_backward(*tensors[:3], lse, *tensors[3:8], lse)
    heads.split_heads_forward(*tensors[:3], cuda.to_device(np.ones(
        (shape[0], shape[2], 3 * shape[1] * shape[3]), np.float32)))
    heads.merge_heads_backward(tensors[0], cuda.to_device(np.ones(
        (shape[0], shape[2], shape[1] * shape[3]), np.float32)))


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
    """-> dx (B*T, C), dw_qkv (C, 3C), dw_o (C, C), and attention's delta (B, H, T)."""
    q, k, v, att, lse, merged = saved
    B, H, T, D = q.shape
    dmerged, dw_o = ref.matmul_backward(dy, merged, w_o)
    datt = ref.merge_heads_backward(dmerged.reshape(B, T, H * D), H)
    dqkv = ref.split_heads_backward(*ref.attention_backward(datt, q, k, v, att, lse))
    dx, dw_qkv = ref.matmul_backward(dqkv.reshape(B * T, 3 * H * D), x.reshape(B * T, -1), w_qkv)
    return dx, dw_qkv, dw_o, ref.attention_delta(datt, att)


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
    lse, delta = to_device(poisoned((B, H, T)), poisoned((B, H, T)))
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
    attention.attention_backward(dq, dk, dv, delta, datt, q, k, v, att, lse,
                                 block=attention_block)
    heads.split_heads_backward(qkv, dq, dk, dv, block=copy_block)   # qkv now holds dqkv
    gemm.matmul(dx, qkv.reshape(B * T, 3 * C), d_w_qkv, transpose_b=True, tile=gemm_tile)
    gemm.matmul(dw_qkv, d_x.reshape(B * T, C), qkv.reshape(B * T, 3 * C), transpose_a=True,
                accumulate=True, tile=gemm_tile)

    want_dx, want_dw_qkv, want_dw_o, want_delta = pipeline_backward(
        dy.astype(np.float64), x64, w64, w_o.astype(np.float64), saved)
    assert_close(delta.copy_to_host(), want_delta, TOL_F32_OP, f"pipeline {shape} delta")
    assert_close(dx.copy_to_host(), want_dx, TOL_F32_OP, f"pipeline {shape} dx")
    assert_close(dw_qkv.copy_to_host(), want_dw_qkv + dw_qkv0, TOL_F32_OP,
                 f"pipeline {shape} dw_qkv")
    assert_close(dw_o.copy_to_host(), want_dw_o + dw_o0, TOL_F32_OP, f"pipeline {shape} dw_o")


@given(shape=PIPELINE_SHAPES, seed=SEEDS)
def test_pipeline_matches_reference(shape, seed):
    check_pipeline(shape, seed)


@pytest.mark.skipif(not REAL_SHAPES, reason="andrea-120m's shapes need a GPU and real shapes")
def test_andrea_120m_attention_layer():
    """The model's own shapes, whatever Hypothesis draws: attention forward and backward
    and the composed pipeline at (B, H, T, D) = (16, 12, 1024, 64), default geometry."""
    check_attention_forward(ANDREA_120M, None, None, seed=0)
    check_attention_backward(ANDREA_120M, None, None, seed=1)
    check_pipeline(ANDREA_120M, seed=2)
