"""Flash attention on the tensor cores (kernels/attention/flash.py) against the float64
reference (microgpt.reference.attention_forward / backward) on the same bf16-rounded q, k,
v and dout (and, in the backward, the same bf16 out the kernels read): T not a multiple of
the tiles, T = 1, one head, head_dims that are not a multiple of 16 (padded inside the
kernels), every tile shape of the passes, warps of 16 and 32 rows, register caps.

Tolerances, derived (u = 2^-9, the unit roundoff of bf16's 8 significant bits):
- out, dv: products of bf16 values are exact in float32 and accumulate there (~1e-6), so
  what remains are two roundings to bf16: p as the tensor cores take it, and the result
  as it is stored, each at most u relative per element: 2u = 2^-8 together. The error of p
  is weighted by |v|, not by the |out| its average cancels down to, so allow twice that:
  TOL_OUT = 2^-7.
- dq, dk: ds = p (dp - delta) is rounded where p alone was, and the result once: 2u as
  for out. But the ds of a row sum to zero, so dq = sum ds k is a sum of terms larger
  than itself, and the weighting of the roundings by those terms is larger than for out:
  TOL_GRAD = 3 * 2^-8, 1.5 x TOL_OUT. delta = rowsum(dout * out) is taken from the bf16
  out in both (the backward's input): from the exact out, the reference differed by
  u |dout| |out| in delta, which that cancellation amplified past TOL_GRAD (a draw at T 2:
  1.22e-2).
- lse and delta are float32 results (float32 sums of exact products, exp2 / log2 to
  2^-22): TOL_F32_OP.
A wrong tile, mask or rescale moves whole rows by O(1): far outside all of these.

Every case runs with the heads in either layout the kernels take: arrays of their own, or
(fused) views of fused rows as the bf16 step passes them, q, k, v (and dq, dk, dv) the
three parts of one (B, T, 3C) array, out (and dout) the one part of a (B, T, C) one. The
fused arrays of the outputs are poisoned whole and compared whole: a write one pitch or
one head off lands in a neighbour's place and shows there.
"""
import functools

import numpy as np
import pytest
from helpers import (REAL_SHAPES, TOL_F32_OP, assert_close, assert_attention_gradients, bf16,
                     from_bf16, poisoned, randn)
from hypothesis import assume, example, given
from hypothesis import strategies as st
from numba import cuda

from microgpt import reference as ref
from microgpt.cuda_backend import CudaBackend
from microgpt.kernels.attention import flash as fa
from microgpt.kernels.attention import flash_backward as fb
from microgpt.kernels.attention.flash import FlashTile
from microgpt.kernels.device import SHARED_LIMIT

TOL_OUT = 2.0**-7
TOL_GRAD = 3 * 2.0**-8
BF16_NAN = 0xFFFF
SEEDS = st.integers(0, 2**32 - 1)

if REAL_SHAPES:
    # the model's head_dims (32, 64), the design notes' 72, and a D below one chunk; each
    # tile compiles three kernels, and the float64 reference of a full andrea-120m
    # attention takes seconds: a few real-shape examples
    SHAPES = st.tuples(st.integers(1, 16), st.integers(1, 12), st.integers(1, 1024),
                       st.sampled_from([32, 64, 72, 4]))
    TILES = st.sampled_from([None, FlashTile(64, 32), FlashTile(128, 32, 32),
                             FlashTile(64, 32, 16, 2), FlashTile(64, 32, stages=3),
                             FlashTile(128, 32, 16, 2, 3)])
else:
    # one or two warps per block (the simulator runs every barrier of every thread, two
    # per warp-collective atom: a block step costs ~0.1 s), T across two tiles and steps
    # with ragged ends, D padded (4, 12; 72 below) or not, by cp.async (D a multiple of 8)
    # or element by element; a warp of 16 rows or of 32 (two row tiles); three stages
    # (the example below walks past them)
    SHAPES = st.tuples(st.sampled_from([1, 2]), st.sampled_from([1, 2]), st.integers(1, 20),
                       st.sampled_from([4, 8, 12, 16])).filter(lambda s: s[0] * s[1] < 4)
    TILES = st.sampled_from([FlashTile(16, 16), FlashTile(32, 16), FlashTile(16, 32),
                             FlashTile(32, 16, 32), FlashTile(16, 16, stages=3)])


class Heads:
    """Some (B, H, T, D) bf16 arrays on the device: each its own, or (fused) the parts of
    one array of fused rows (B, T, P * H * D), seen through the cuda backend's heads_view,
    the views the bf16 step gives attention."""

    def __init__(self, arrays, fused):
        B, H, T, D = arrays[0].shape
        if fused:
            rows = np.concatenate([x.transpose(0, 2, 1, 3).reshape(B, T, H * D)
                                   for x in arrays], axis=2)
            self.rows = cuda.to_device(rows)
            self.views = [backend().heads_view(self.rows, p, H, D) for p in range(len(arrays))]
        else:
            self.rows, self.views = None, [cuda.to_device(x) for x in arrays]
        self.shape = (B, H, T, D)

    def to_host(self):
        """The arrays' bits, each (B, H, T, D): through the whole fused rows, read back."""
        if self.rows is None:
            return [x.copy_to_host() for x in self.views]
        B, H, T, D = self.shape
        rows = self.rows.copy_to_host().reshape(B, T, -1, H, D)
        return [rows[:, :, p].transpose(0, 2, 1, 3) for p in range(len(self.views))]


@functools.cache
def backend():
    """The cuda backend (a stream of its own), made at the first test that needs it:
    collecting this file does no CUDA work."""
    return CudaBackend()


def poisoned_heads(shape, count, fused):
    return Heads([np.full(shape, BF16_NAN, np.uint16)] * count, fused)


def check_forward(shape, tile, seed, fused):
    rng = np.random.default_rng(seed)
    (q, q64), (k, k64), (v, v64) = (bf16(randn(rng, *shape)) for _ in range(3))
    out = poisoned_heads(shape, 1, fused)
    lse = cuda.to_device(poisoned(shape[:3]))
    fa.flash_attention_forward(*out.views, lse, *Heads([q, k, v], fused).views, tile=tile)
    want_out, want_lse = ref.attention_forward(q64, k64, v64)
    what = f"flash attention {shape} tile={tile} fused={fused}"
    assert_close(from_bf16(out.to_host()[0]), want_out, TOL_OUT, what + " out")
    assert_close(lse.copy_to_host(), want_lse, TOL_F32_OP, what + " lse")


def check_backward(shape, tiles, seed, fused):
    B, H, T, D = shape
    rng = np.random.default_rng(seed)
    (q, q64), (k, k64), (v, v64), (dout, dout64) = (bf16(randn(rng, *shape))
                                                     for _ in range(4))
    want_out, want_lse = ref.attention_forward(q64, k64, v64)
    out, _ = bf16(want_out.astype(np.float32))          # as the forward stores them
    lse = want_lse.astype(np.float32)
    grads = poisoned_heads(shape, 3, fused)
    delta = cuda.to_device(poisoned(shape[:3]))
    (dout_dev,), (out_dev,) = Heads([dout], fused).views, Heads([out], fused).views
    fb.flash_attention_backward(*grads.views, delta, dout_dev, *Heads([q, k, v], fused).views,
                                out_dev, cuda.to_device(lse), tiles=tiles)
    got = [from_bf16(g) for g in grads.to_host()] + [delta.copy_to_host()]
    # the reference takes the out the kernels take (delta = rowsum(dout * out) is theirs)
    out64 = from_bf16(out)
    want = (*ref.attention_backward(dout64, q64, k64, v64, out64, want_lse),
            ref.attention_delta(dout64, out64))
    what = f"flash attention backward {shape} tiles={tiles} fused={fused}"
    assert_attention_gradients(got, want, dout64, q64, k64, v64, TOL_OUT, TOL_GRAD, what)


# T = 1 in one head; the design notes' head_dim 72 (padded to 80 inside the kernels)
EXAMPLE_TILE = None if REAL_SHAPES else FlashTile(16, 16)
EXAMPLE_SHAPES = [(1, 1, 1, 8), (1, 1, 1000 if REAL_SHAPES else 5, 72)]
# four steps through three stages, the last ragged: every stage refilled, one twice
STAGED_TILE, STAGED_SHAPE = FlashTile(16, 16, stages=3), (1, 1, 57, 8)


def examples(test, tiled):
    for shape in EXAMPLE_SHAPES:
        test = example(shape=shape, seed=1, fused=False, **tiled(EXAMPLE_TILE))(test)
    return example(shape=STAGED_SHAPE, seed=2, fused=True, **tiled(STAGED_TILE))(test)


def fits(tile, D, kind):
    """Whether a drawn tile fits the shared memory at this head_dim (a wide D takes
    smaller tiles; the launcher's refusal is tested below)."""
    return tile is None or fa.shared_bytes(tile, D, kind) <= SHARED_LIMIT


@given(shape=SHAPES, tile=TILES, seed=SEEDS, fused=st.booleans())
def test_flash_attention_forward(shape, tile, seed, fused):
    assume(fits(tile, shape[3], "forward"))
    check_forward(shape, tile, seed, fused)


@given(shape=SHAPES, tiles=st.tuples(TILES, TILES), seed=SEEDS, fused=st.booleans())
def test_flash_attention_backward(shape, tiles, seed, fused):
    assume(fits(tiles[0], shape[3], "dq") and fits(tiles[1], shape[3], "dkdv"))
    check_backward(shape, tiles, seed, fused)


test_flash_attention_forward = examples(test_flash_attention_forward,
                                       lambda tile: dict(tile=tile))
test_flash_attention_backward = examples(test_flash_attention_backward,
                                         lambda tile: dict(tiles=(tile, tile)))


def test_default_tiles_fit_and_pad():
    for D in (4, 32, 64, 72, 128):
        for kind in fa.RESIDENT:
            fa.check_tile(fa.default_tile(D, kind), D, kind)
    assert fa.head_widths(72) == (80, 128) and fa.head_widths(4) == (16, 16)
    assert fa.head_widths(64) == (64, 64) and fa.head_widths(24) == (32, 32)


def test_fits_says_where_the_default_tiles_end():
    """Every head_dim to 128 fits 48 KiB; past it a shared row is 256 wide and none does
    (the model then refuses bf16, and the trainer's default falls back to fp32)."""
    assert all(fa.fits(D) for D in (1, 4, 32, 64, 72, 100, 128))
    assert not any(fa.fits(D) for D in (129, 192, 256))


def test_flash_attention_rejects_bad_arguments():
    def dev(*shape, dtype=np.uint16):
        return cuda.to_device(np.ones(shape, dtype))

    x, lse = dev(1, 2, 3, 32), dev(1, 2, 3, dtype=np.float32)
    with pytest.raises(ValueError, match="lse: expected shape"):
        fa.flash_attention_forward(x, dev(1, 2, 4, dtype=np.float32), x, x, x)
    with pytest.raises(TypeError, match="q: expected dtype uint16"):
        fa.flash_attention_forward(x, lse, dev(1, 2, 3, 32, dtype=np.float32), x, x)
    with pytest.raises(ValueError, match="multiples of 16"):
        fa.flash_attention_forward(x, lse, x, x, x, tile=FlashTile(24, 16))
    with pytest.raises(ValueError, match="warp_rows must be 16 or 32"):
        fa.flash_attention_forward(x, lse, x, x, x, tile=FlashTile(48, 16, 32))
    with pytest.raises(ValueError, match="min_blocks must be 1 to 16"):
        fa.flash_attention_forward(x, lse, x, x, x, tile=FlashTile(64, 16, 16, 17))
    with pytest.raises(ValueError, match="stages must be 2 to 4"):
        fa.flash_attention_forward(x, lse, x, x, x, tile=FlashTile(64, 16, stages=1))
    wide = dev(1, 2, 3, 64)
    with pytest.raises(ValueError, match="shared memory"):
        fb.flash_attention_backward(*[wide] * 3, lse, *[wide] * 5, lse,
                                    tiles=(FlashTile(128, 128), None))
    with pytest.raises(ValueError, match="delta: expected shape"):
        fb.flash_attention_backward(x, x, x, dev(1, 2, 4, dtype=np.float32), x, x, x, x, x, lse)
    # views: a head's row must be contiguous, and (D a multiple of 8) rows 16-byte aligned
    with pytest.raises(ValueError, match="q: a head's row of D elements must be contiguous"):
        fa.flash_attention_forward(x, lse, dev(1, 2, 3, 64)[:, :, :, ::2], x, x)
    with pytest.raises(ValueError, match="k: the rows of a view must start 16-byte aligned"):
        fa.flash_attention_forward(x, lse, x, dev(1, 2, 3, 40)[:, :, :, 4:36], x)


def test_the_attention_ops_send_bf16_heads_here(monkeypatch):
    """kernels.attention's launchers, the ops the model calls, run bf16 heads on flash
    attention: each calls the flash launcher with its arguments and default tiles (so
    gives its bits: recorded, rather than launched a second time to compare), the
    backward through the cuda backend's op too; the results against float64. Geometry
    meant for the float32 kernels is refused."""
    from microgpt.kernels import attention

    calls = []

    def recorded(launcher):
        def record(*args, **kwargs):
            calls.append((launcher.__name__, args, kwargs))
            return launcher(*args, **kwargs)
        return record
    for module, name in ((fa, "flash_attention_forward"), (fb, "flash_attention_backward")):
        monkeypatch.setattr(module, name, recorded(getattr(module, name)))
    shape = (1, 2, 5, 16)
    rng = np.random.default_rng(11)
    (q, q64), (k, k64), (v, v64), (dout, dout64) = (bf16(randn(rng, *shape)) for _ in range(4))
    q, k, v, dout = map(cuda.to_device, (q, k, v, dout))
    out = cuda.to_device(np.full(shape, BF16_NAN, np.uint16))
    lse = cuda.to_device(poisoned(shape[:3]))
    attention.attention_forward(out, lse, q, k, v)
    assert calls == [("flash_attention_forward", (out, lse, q, k, v), {"stream": 0})]
    want_out, want_lse = ref.attention_forward(q64, k64, v64)
    assert_close(from_bf16(out.copy_to_host()), want_out, TOL_OUT, "the op's out")
    assert_close(lse.copy_to_host(), want_lse, TOL_F32_OP, "the op's lse")
    grads = [cuda.to_device(np.full(shape, BF16_NAN, np.uint16)) for _ in range(3)]
    delta = cuda.to_device(poisoned(shape[:3]))
    backend().attention_backward(*grads, delta, dout, q, k, v, out, lse)
    assert calls[1] == ("flash_attention_backward",
                        (*grads, delta, dout, q, k, v, out, lse), {"stream": backend().stream})
    out64 = from_bf16(out.copy_to_host())
    want = (*ref.attention_backward(dout64, q64, k64, v64, out64, lse.copy_to_host()),
            ref.attention_delta(dout64, out64))
    got = [from_bf16(g.copy_to_host()) for g in grads] + [delta.copy_to_host()]
    assert_attention_gradients(got, want, dout64, q64, k64, v64, TOL_OUT, TOL_GRAD,
                               "the ops' backward")
    with pytest.raises(ValueError, match="bf16 heads take flash attention's tiles"):
        attention.attention_forward(out, lse, q, k, v, block=32)
    with pytest.raises(ValueError, match="bf16 heads take flash attention's tiles"):
        attention.attention_backward(*grads, delta, dout, q, k, v, out, lse, blocks_per_head=1)
