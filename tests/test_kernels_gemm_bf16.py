"""The bf16 tensor-core GEMM (kernels/gemm/: bf16.py and the kernels it routes to)
against a float64 matmul of the same bf16-rounded operands: every transpose and epilogue,
ragged edges, unaligned rows, split-K, several tiles; and every product of an andrea-120m
and andrea-12m step on a GPU.
Tolerances, derived:
- float32 out: the products of bf16 values are exact in float32, so what remains is
  float32 accumulation, as in the float32 GEMM: TOL_F32_OP (1e-5).
- bf16 out: the float32 result rounded to the nearest bf16: half a unit in the last of 8
  significant bits, at most 2^-8 relative per element, so at most 2^-8 in norm, plus the
  accumulation's 1e-5.
- the GELU epilogues. Forward: pre is a bf16 out, and out is gelu of pre as stored
  (gelu in float32 within 1e-5, tests/test_kernels_elementwise.py, then rounded): both
  TOL_BF16_OUT. Backward (TOL_GELU_BACKWARD): the product's 1e-5 times gelu' (|gelu'| <=
  1.13) relative to a result whose norm is ~0.6 of the product's (gelu' of unit normal
  values is ~0.6 in the mean square), under 2e-5, and gelu' itself 1e-5; the wgmma
  kernel rounds gelu' to bf16 (2^-8) before it multiplies; then the rounding of out, 2^-8.
"""
from unittest import mock

import numpy as np
import pytest
from helpers import (ON_GPU, REAL_SHAPES, TOL_BF16_OUT, TOL_F32_OP, assert_close, bf16,
                     from_bf16, poisoned, randn)
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from numba import cuda

from microgpt import reference as ref
from microgpt.gemms import step_products
from microgpt.kernels import device, gemm
from microgpt.kernels.gemm import bf16 as gemm_bf16
from microgpt.kernels.gemm import fp32, persistent, tuning
from microgpt.kernels.gemm.tiles import (BF16_OUT, FOLD_STEPS, GROUP, MmaTile, PersistentTile,
                                         WgmmaTile)
from microgpt.kernels.gemm import turns
from microgpt.kernels.gemm.turns import split_turns

EPILOGUES = ["float32", "bf16", "accumulate", "split_k"]
TOL_GELU_BACKWARD = 2.0**-7 + 3 * TOL_F32_OP


# the products of a training step: andrea-120m (B 16, T 1024) and andrea-12m (B 64, T 256)
STEP_PRODUCTS = (step_products(16, 1024, 768, 50304)
                 + step_products(64, 256, 384, 4096))

if REAL_SHAPES:
    SIZES = st.tuples(st.integers(1, 16384), st.integers(1, 3072), st.integers(1, 3072))
    TILES = st.sampled_from([None, tuning.WIDE_TILE, tuning.FOLD_TILE,
                             tuning.TALL_TILE, WgmmaTile(64, 64, 32, 4, 1),
                             tuning.LARGE_TILE, tuning.SMALL_TILE,
                             MmaTile(64, 128, 32, 32, 64, 3)])
else:
    # one or two warps (mma.sync) or warpgroups (wgmma) per block, so a few slabs per
    # dimension and several K steps (the pipeline's buffers reused) stay within the
    # simulator's budget; the wgmma tiles take every swizzle (16, 32, 64 wide rows) and
    # operands of several panels
    SIZES = st.tuples(st.integers(1, 24), st.integers(1, 24), st.integers(1, 56))
    TILES = st.sampled_from([MmaTile(16, 16, 16, 16, 16, 2), MmaTile(32, 16, 16, 16, 16, 3),
                             MmaTile(16, 32, 32, 16, 32, 2), WgmmaTile(64, 16, 16, 3, 1),
                             WgmmaTile(64, 32, 32, 3, 1), WgmmaTile(128, 16, 16, 4, 2),
                             WgmmaTile(64, 128, 64, 3, 1)])
# multiples of 8 take the cp.async path, other sizes the element-wise one
ALIGNED = st.booleans()
SEEDS = st.integers(0, 2**32 - 1)


def check_matmul_bf16(M, N, K, transpose_a, transpose_b, epilogue, tile, seed, split_k,
                      max_chain=tuning.MAX_CHAIN, pitched=False, biased=False,
                      deterministic=False):
    """epilogue: "float32" or "bf16" (out written), "accumulate" or "split_k" (a float32
    out added to); split_k None takes the launcher's default; a short max_chain makes the
    kernel fold its accumulators. pitched: a and b are views of some of wider matrices'
    columns (drawn values beside them, which must not be read), starting on a 16-byte
    boundary where the sizes are multiples of 8, anywhere otherwise. biased: a drawn bias
    (N,) added to every row (a written out only). deterministic: split-K's parts added in
    the order of the splits."""
    rng = np.random.default_rng(seed)
    a, a64, d_a = operand(rng, *((K, M) if transpose_a else (M, K)), pitched)
    b, b64, d_b = operand(rng, *((N, K) if transpose_b else (K, N)), pitched)
    expected = (a64.T if transpose_a else a64) @ (b64.T if transpose_b else b64)
    bias = randn(rng, N) if biased else None
    if biased:
        expected += bias
    accumulate = epilogue in ("accumulate", "split_k")
    if epilogue == "bf16":
        out = cuda.to_device(poisoned((M, N), np.uint16))
    else:
        out0 = randn(rng, M, N) if accumulate else poisoned((M, N))
        out = cuda.to_device(out0)
        if accumulate:
            expected += out0
    gemm_bf16.matmul_bf16(out, d_a, d_b, transpose_a, transpose_b, accumulate,
                          None if bias is None else cuda.to_device(bias), tile=tile,
                          split_k=split_k, deterministic=deterministic, max_chain=max_chain)
    got = out.copy_to_host()
    if epilogue == "bf16":
        got = from_bf16(got)
    assert_close(got, expected, TOL_BF16_OUT if epilogue == "bf16" else TOL_F32_OP,
                 f"matmul_bf16 {M}x{N}x{K} ta={transpose_a} tb={transpose_b} {epilogue} "
                 f"{tile} split_k={split_k} max_chain={max_chain} pitched={pitched} "
                 f"biased={biased} deterministic={deterministic}")


def operand(rng, rows, cols, pitched):
    """A bf16 operand (bits, float64 values) and its device array: a matrix of its own, or
    (pitched) a view of columns [left, left + cols) of a wider one."""
    if not pitched:
        bits, values = bf16(randn(rng, rows, cols))
        return bits, values, cuda.to_device(bits)
    # a view of aligned columns keeps its rows 16-byte aligned: whole chunks beside it
    chunk = 8 if cols % 8 == 0 else 1
    left, right = (chunk * int(rng.integers(1, 3)) for _ in range(2))
    bits, values = bf16(randn(rng, rows, left + cols + right))
    view = cuda.to_device(bits)[:, left:left + cols]
    return bits[:, left:left + cols], values[:, left:left + cols], view


@given(sizes=SIZES, aligned=ALIGNED, transpose_a=st.booleans(), transpose_b=st.booleans(),
       epilogue=st.sampled_from(EPILOGUES), tile=TILES, fold=st.booleans(),
       pitched=st.booleans(), seed=SEEDS)
def test_matmul_bf16_matches_reference(sizes, aligned, transpose_a, transpose_b, epilogue,
                                       tile, fold, pitched, seed):
    if aligned or isinstance(tile, WgmmaTile):    # (the bulk tensor copies need it)
        sizes = tuple(max(8, s // 8 * 8) for s in sizes)
    check_matmul_bf16(*sizes, transpose_a, transpose_b, epilogue, tile, seed,
                      split_k={"accumulate": 1, "split_k": 2}.get(epilogue),
                      max_chain=16 if fold else tuning.MAX_CHAIN, pitched=pitched)


def check_matmul_gelu(M, N, K, backward, tile, seed, biased=False):
    """The MLP's GELU epilogues: forward pre = x @ w (M, N) (+ a bias, where biased) and
    out = gelu(pre as stored), both poisoned before; backward out = (dy @ w^T) *
    gelu'(pre), pre drawn."""
    rng = np.random.default_rng(seed)
    x, x64 = bf16(randn(rng, M, K))
    w, w64 = bf16(randn(rng, *((N, K) if backward else (K, N))))
    bias = randn(rng, N) if biased else None
    out = cuda.to_device(poisoned((M, N), np.uint16))
    what = f"matmul_bf16 gelu {M}x{N}x{K} backward={backward} {tile} biased={biased}"
    if backward:
        pre, pre64 = bf16(randn(rng, M, N))
        gemm_bf16.matmul_bf16(out, cuda.to_device(x), cuda.to_device(w), transpose_b=True,
                              gelu="backward", pre=cuda.to_device(pre), tile=tile)
        assert_close(from_bf16(out.copy_to_host()), ref.gelu_backward(x64 @ w64.T, pre64),
                     TOL_GELU_BACKWARD, what)
        return
    pre = cuda.to_device(poisoned((M, N), np.uint16))
    gemm_bf16.matmul_bf16(out, cuda.to_device(x), cuda.to_device(w),
                          bias=None if bias is None else cuda.to_device(bias), gelu="forward",
                          pre=pre, tile=tile)
    stored = from_bf16(pre.copy_to_host())
    assert_close(stored, x64 @ w64 + (0.0 if bias is None else bias), TOL_BF16_OUT,
                 what + " pre")
    assert_close(from_bf16(out.copy_to_host()), ref.gelu_forward(stored), TOL_BF16_OUT, what)


@given(sizes=SIZES, aligned=ALIGNED, backward=st.booleans(), tile=TILES, seed=SEEDS,
       biased=st.booleans())
def test_gelu_epilogues_match_reference(sizes, aligned, backward, tile, seed, biased):
    # the GELU epilogues are the wgmma kernel's (an mma.sync tile is refused: below)
    assume(isinstance(tile, WgmmaTile) or tile is None and tuning.wgmma_available())
    if aligned or tile is None or isinstance(tile, WgmmaTile):   # (unaligned: refused)
        sizes = tuple(max(8, s // 8 * 8) for s in sizes)
    check_matmul_gelu(*sizes, backward, tile, seed, biased and not backward)


@given(sizes=SIZES, aligned=ALIGNED, out_bf16=st.booleans(), fold=st.booleans(), tile=TILES,
       seed=SEEDS)
def test_a_bias_is_added_to_every_row_once(sizes, aligned, out_bf16, fold, tile, seed):
    """X @ W + bias (GPT-2's linear layers) in either kernel's epilogue, out bf16 or
    float32; a short max_chain makes the launcher fold the accumulators, or split K into
    float32 parts added up in out, of which the first alone adds the bias."""
    if aligned or isinstance(tile, WgmmaTile):
        sizes = tuple(max(8, s // 8 * 8) for s in sizes)
    M, N, K = sizes
    rng = np.random.default_rng(seed)
    (x, x64), (w, w64) = bf16(randn(rng, M, K)), bf16(randn(rng, K, N))
    bias = randn(rng, N)
    out = cuda.to_device(poisoned((M, N), np.uint16 if out_bf16 else np.float32))
    gemm_bf16.matmul_bf16(out, cuda.to_device(x), cuda.to_device(w), bias=cuda.to_device(bias),
                          tile=tile, max_chain=16 if fold else tuning.MAX_CHAIN)
    got = out.copy_to_host()
    assert_close(from_bf16(got) if out_bf16 else got, x64 @ w64 + bias,
                 TOL_BF16_OUT if out_bf16 else TOL_F32_OP,
                 f"matmul_bf16 + bias {M}x{N}x{K} bf16={out_bf16} {tile} fold={fold}")


# the activation each product of step_products writes in the model (microgpt/model.py)
WRITTEN = {"QKV forward": "qkv", "QKV dX": "dln", "W_O forward": "proj", "W_O dX": "dmerged",
           "MLP up forward": "fc_gelu", "MLP up dX": "dln", "MLP down forward": "proj",
           "MLP down dX": "dfc", "LM head forward": "logits", "LM head dX": "dln"}


def test_step_products_write_what_the_model_writes():
    """step_products, which the GPU tests and the bench run, against the bf16 model's
    activation table: each forward and dX product's out has the shape and dtype of the
    buffer the model writes with it (bf16 for a bf16 epilogue, float32 otherwise)."""
    from microgpt import get_config
    from microgpt.activations import activation_specs

    cfg = get_config("andrea-12m")
    B, T = 4, 32
    specs = {spec.name: spec for spec in activation_specs(cfg, B, T, precision="bf16")}
    products = step_products(B, T, cfg.d_model, cfg.vocab_size)
    assert {name for name, *_ in products} - set(WRITTEN) == {
        f"{layer} dW" for layer in ("QKV", "W_O", "MLP up", "MLP down", "LM head")}
    for name, M, N, _, _, _, epilogue in products:
        if name in WRITTEN:
            spec = specs[WRITTEN[name]]
            assert (np.prod(spec.shape[:-1]), spec.shape[-1]) == (M, N), name
            bf16_out = epilogue in BF16_OUT
            assert (spec.dtype == "uint16") == bf16_out, (name, spec.dtype, epilogue)


@pytest.mark.skipif(not REAL_SHAPES, reason="the model's products need a GPU and real shapes")
@pytest.mark.parametrize("product", STEP_PRODUCTS, ids=lambda p: f"{p[0]} {p[1]}x{p[2]}x{p[3]}")
def test_step_products(product):
    """Each product of an andrea-120m and an andrea-12m step, with the launcher's defaults
    (tile, and split-K for the weight gradients)."""
    _, M, N, K, ta, tb, epilogue = product
    if epilogue.startswith("gelu"):
        check_matmul_gelu(M, N, K, epilogue == "gelu_backward", None, seed=5)
    else:
        check_matmul_bf16(M, N, K, ta, tb, epilogue, None, seed=5, split_k=None)


def test_a_kernel_takes_a_matrix_then_a_view():
    """The same product with a a matrix of its own and then a view of some of a wider
    one's columns: one kernel, two overloads (a view compiles its own), each of which needs
    the driver's opt-in for its shared memory on a GPU (the view's launch was refused when
    the opt-in was kept per kernel)."""
    tile = tuning.WIDE_TILE if ON_GPU else WgmmaTile(64, 16, 16, 3, 1)
    M, N, K = (2 * tile.rows, 2 * tile.cols, 4 * tile.depth) if ON_GPU else (64, 16, 48)
    for pitched in (False, True):
        check_matmul_bf16(M, N, K, True, False, "split_k", tile, seed=8, split_k=2,
                          pitched=pitched)


@pytest.mark.parametrize("tile", [tuning.WIDE_TILE, tuning.FOLD_TILE, tuning.TALL_TILE,
                                  tuning.LARGE_TILE, tuning.SMALL_TILE,
                                  tuning.LEAN_TILE])
def test_named_tiles_compile_and_run(tile):
    """The tiles the GPU runs by default (wgmma) and the mma.sync kernel's named ones, once
    each in the simulator too: one block (~30 s of simulation for the large ones), ragged
    edges, and a K of one slab more than the stages so that the pipeline wraps around its
    buffers."""
    check_matmul_bf16(tile.rows - 8, tile.cols - 8, tile.stages * tile.depth + 8, False,
                      True, "float32", tile, seed=7, split_k=None)


def test_default_tile_and_split():
    assert tuning.default_tile(16384, 2304, 768) == tuning.LARGE_TILE
    assert tuning.default_tile(16384, 1152, 384) == tuning.SMALL_TILE     # short K
    assert tuning.default_tile(16384, 384, 1536) == tuning.SMALL_TILE     # few tiles
    assert tuning.default_tile(768, 768, 16384, True) == tuning.LARGE_TILE  # split K
    assert tuning.default_tile(16384, 768, 50304) == tuning.LEAN_TILE     # folded K
    # a weight gradient: few output tiles, a long K -> split until every SM has a block
    tile = tuning.default_tile(768, 768, 16384, True)
    tiles = (768 // tile.rows) ** 2
    assert tuning.default_split_k(768, 768, 16384, tile) * tiles >= 4 * device.SMS
    # a wgmma tile takes a whole SM: as many blocks as fill the SMs in one wave
    tile = tuning.WIDE_TILE
    tiles = (768 // tile.rows) * (768 // tile.cols)
    split = tuning.default_split_k(768, 768, 16384, tile)
    assert split * tiles <= device.SMS < (split + 1) * tiles
    assert tuning.default_split_k(16384, 2304, 768, tuning.LARGE_TILE) == 1


@pytest.mark.parametrize("M, N, tile, split", [
    (768, 3072, tuning.TALL_TILE, 5), (3072, 768, tuning.TALL_TILE, 5),
    (768, 2304, tuning.TALL_TILE, 7), (50304, 768, tuning.TALL_TILE, 4),
    (768, 768, tuning.WIDE_TILE, 7)])
def test_weight_gradients_fill_their_last_wave(M, N, tile, split):
    """andrea-120m's weight gradients on Hopper (K 16384: at least 4 splits keep each chain
    within MAX_CHAIN): the tall tile where its waves, at TALL_COST a block, take no longer
    than the wide tile's, and the fewest splits from the least on whose last wave of
    blocks is at least 7/8 full: the MLP's 48 tall tiles 5 (4 would leave 1.45 waves),
    QKV's 36 7, the LM head's 786 fill 23.8 waves at 4 already. W_O's 768 x 768 would be
    12 tall tiles in 11 splits, one wave: the wide tile's 18 in 7 fill one too."""
    assert tuning.default_tile(M, N, 16384, True, True) == tile
    assert tuning.default_split_k(M, N, 16384, tile) == split
    blocks = -(-M // tile.rows) * -(-N // tile.cols) * split
    assert 8 * blocks >= 7 * device.SMS * -(-blocks // device.SMS)


def test_hopper_takes_the_wgmma_tiles():
    assert tuning.default_tile(16384, 2304, 768, wgmma=True) == tuning.WIDE_TILE
    assert tuning.default_tile(768, 768, 16384, True, True) == tuning.WIDE_TILE
    # a long K into a float32 out: the tall tile (a bf16 out of K 3072 stays wide)
    assert tuning.default_tile(16384, 768, 3072, wgmma=True) == tuning.TALL_TILE
    assert tuning.default_tile(16384, 768, 3072, wgmma=True,
                                  bf16_out=True) == tuning.WIDE_TILE
    # a K too long for one chain: a float32 out is split (below), a bf16 one folded
    assert tuning.default_tile(16384, 768, 50304, wgmma=True) == tuning.TALL_TILE
    # andrea-12m's LM head dX and dW: the tall tile's blocks (172; 44 tiles x 6 splits)
    # take two waves, as the wide tile's (256 each) do, each block 1.42x as long: wide
    assert tuning.default_tile(16384, 384, 4096, wgmma=True) == tuning.WIDE_TILE
    assert tuning.default_tile(4096, 384, 16384, True, True) == tuning.WIDE_TILE
    assert tuning.default_tile(16384, 768, 50304, wgmma=True,
                                  bf16_out=True) == tuning.FOLD_TILE


def test_hopper_routes_to_the_persistent_tiles():
    """Where the product needs nothing the persistent kernel lacks: the copier tile; where
    256 columns would leave more than an eighth of the last column of tiles empty
    (andrea-12m's N 384) the narrow copier's 192, as for a split-K product that it takes in
    less time; a bf16 out of a K longer than a chain folds."""
    route = lambda M, N, K, *flags: tuning.default_tile(M, N, K, *flags, persistent=True)
    assert route(16384, 2304, 768, False, True) == tuning.COPIER_TILE
    assert route(16384, 50304, 768, False, True, True) == tuning.COPIER_TILE  # 128 of 50,432
    assert route(768, 768, 16384, True, True) == tuning.COPIER_TILE           # split K
    assert route(16384, 768, 50304, False, True) == tuning.COPIER_TILE        # split, written
    assert route(16384, 1152, 384, False, True) == tuning.COPIER_TILE         # 128 of 1,280
    assert route(16384, 384, 1536, False, True) == tuning.NARROW_COPIER_TILE  # 128 of 512
    assert route(4096, 384, 16384, True, True) == tuning.NARROW_COPIER_TILE   # 256 items
    assert route(16384, 384, 384, False, True) == tuning.NARROW_COPIER_TILE
    assert route(384, 384, 16384, True, True) == tuning.NARROW_COPIER_TILE
    # split K: the narrow copier where its waves of items take fewer slabs' time
    # (split_slabs: 384 items of 64 slabs in 3 waves, against the copier's 360 of 52), the
    # copier where the two tie (the LM head dW's 18 waves) or it takes fewer
    assert route(3072, 768, 16384, True, True) == tuning.NARROW_COPIER_TILE
    assert route(768, 3072, 16384, True, True) == tuning.NARROW_COPIER_TILE
    assert route(384, 1152, 16384, True, True) == tuning.NARROW_COPIER_TILE
    assert route(50304, 768, 8192, True, True) == tuning.COPIER_TILE
    assert route(384, 1536, 16384, True, True) == tuning.COPIER_TILE
    assert route(768, 2304, 16384, True, True) == tuning.COPIER_TILE
    assert route(16384, 768, 50304, False, True, True) == tuning.FOLD_TILE
    assert route(16384, 2304, 768) == tuning.LARGE_TILE                       # no wgmma


class _Asked(Exception):
    pass


@pytest.mark.parametrize("kwargs, persistent", [
    ({}, True), ({"accumulate": True}, True), ({"deterministic": True}, True),
    ({"deterministic": True, "accumulate": True}, False),      # ordered split-K: its
    # persistent tile is tuning.ordered_tile's (test_ordered_split_k_takes_its_persistent_tile)
    ({"gelu": "forward"}, True),                                 # the GELU epilogue
    ({"gelu": "backward"}, False),                               # (the wgmma kernel's)
    ({"max_chain": 16}, False),                                  # a fold of a bf16 out
    ({"bias": "bias"}, False)])                                  # (staged by the wgmma kernel)
def test_the_launcher_asks_for_persistent_tiles_only_where_they_run(monkeypatch, kwargs,
                                                                     persistent):
    asked = []

    def default_tile(*args):
        asked.append(args[6])
        raise _Asked
    monkeypatch.setattr(gemm_bf16, "default_tile", default_tile)
    # (off Hopper's path on the GPU too: there the ordered split-K asks ordered_tile)
    monkeypatch.setattr(gemm_bf16, "wgmma_takes", lambda *matrices: False)
    a, b = (cuda.to_device(np.zeros((32, 32), np.uint16)) for _ in range(2))
    bf16_out = not kwargs.get("accumulate")
    out = cuda.to_device(np.zeros((32, 32), np.uint16 if bf16_out else np.float32))
    pre = {"pre": cuda.to_device(np.zeros((32, 32), np.uint16))} if "gelu" in kwargs else {}
    if "bias" in kwargs:
        kwargs = {"bias": cuda.to_device(np.zeros(32, np.float32))}
    with pytest.raises(_Asked):
        gemm_bf16.matmul_bf16(out, a, b, **kwargs, **pre)
    assert asked == [persistent]
    monkeypatch.setattr(tuning, "PERSISTENT_ROUTING", False)    # the routing off: never
    with pytest.raises(_Asked):
        gemm_bf16.matmul_bf16(out, a, b, **kwargs, **pre)
    assert asked == [persistent, False]


def test_ordered_split_k_takes_its_persistent_tile(monkeypatch):
    """On Hopper a deterministic backend's ordered split-K runs on the persistent kernel:
    by parts on the atomic split-K's tile (the narrow copier where it covers N whole and
    the copier does not) where its splits fill one wave, else in turns on persistent_tile's;
    with a split_k given, on the wgmma kernel's tiles."""
    asked = []

    def ordered_tile(M, N, K):
        asked.append((M, N, K))
        raise _Asked
    monkeypatch.setattr(gemm_bf16, "wgmma_takes", lambda *matrices: True)
    monkeypatch.setattr(tuning, "ordered_tile", ordered_tile)
    a, b = (cuda.to_device(np.zeros((32, 32), np.uint16)) for _ in range(2))
    out = cuda.to_device(np.zeros((32, 32), np.float32))
    with pytest.raises(_Asked):
        gemm_bf16.matmul_bf16(out, a, b, accumulate=True, deterministic=True)
    assert asked == [(32, 32, 32)]

    def default_tile(*args):            # a split_k given: the wgmma kernel's tiles (they fold)
        asked.append(("default_tile", args[6]))
        raise _Asked
    monkeypatch.setattr(gemm_bf16, "default_tile", default_tile)
    with pytest.raises(_Asked):
        gemm_bf16.matmul_bf16(out, a, b, accumulate=True, deterministic=True, split_k=2)
    assert asked == [(32, 32, 32), ("default_tile", False)]
    monkeypatch.undo()
    route = {(M, N): tuning.ordered_tile(M, N, 16384) for M, N in
             [(768, 2304), (768, 768), (4096, 768), (384, 1152), (384, 384), (1536, 384)]}
    assert route == {(768, 2304): tuning.COPIER_TILE, (768, 768): tuning.COPIER_TILE,
                     (4096, 768): tuning.COPIER_TILE, (384, 1152): tuning.NARROW_COPIER_TILE,
                     (384, 384): tuning.NARROW_COPIER_TILE,
                     (1536, 384): tuning.NARROW_COPIER_TILE}
    assert tuning.ordered_tile(16384, 768, 50304) == tuning.COPIER_TILE   # the LM head's dX
    assert tuning.ordered_tile(4096, 384, 16384) == tuning.PINGPONG_TILE  # 2 waves: turns
    # by parts where the tile's splits fill one wave: every andrea-12m dW of a layer and
    # andrea-120m's W_O (18 copier tiles in 7 splits), not its QKV (54 in 7) nor its LM head's
    by_parts = {(M, N): tuning.ordered_by_parts(M, N, 16384, tile, tuning.default_split_k(
        M, N, 16384, tile)) for (M, N), tile in route.items()}
    assert by_parts == {(768, 2304): False, (768, 768): True, (4096, 768): False,
                        (384, 1152): True, (384, 384): True, (1536, 384): True}


@pytest.mark.parametrize("transpose_b, deterministic", [(False, False), (True, False),
                                                        (False, True)])
def test_a_written_float32_out_sums_split_k(monkeypatch, transpose_b, deterministic):
    """A wgmma tile writing a float32 out with K longer than one chain (the LM head's dX)
    zeroes the poisoned out and adds chains of split-K into it, folding none (in the order
    of the splits when deterministic); a bf16 out of the same product folds (there is no
    adding into bf16)."""
    kernels, make = [], gemm_bf16._kernel

    def recorded(transpose_a, transpose_b, epilogue, aligned, fold, tile, biased):
        kernels.append((epilogue, fold))
        return make(transpose_a, transpose_b, epilogue, aligned, fold, tile, biased)
    monkeypatch.setattr(gemm_bf16, "_kernel", recorded)
    tile = WgmmaTile(64, 16, 16, 3, 1)
    M, N, K = 16, 16, 5 * tile.depth + 8          # chains of 2 slabs: 3 splits
    check_matmul_bf16(M, N, K, False, transpose_b, "float32", tile, seed=6, split_k=None,
                      max_chain=2 * tile.depth, deterministic=deterministic)
    check_matmul_bf16(M, N, K, False, transpose_b, "bf16", tile, seed=6, split_k=None,
                      max_chain=2 * tile.depth, deterministic=deterministic)
    assert kernels == [("ordered" if deterministic else "atomic", False), ("bf16", True)]


if REAL_SHAPES:     # a weight gradient's shape, and the tiles that run it
    ORDERED_SIZES = st.tuples(st.sampled_from([768, 1024]), st.sampled_from([768, 2304]),
                              st.sampled_from([4096, 16384]))
    ORDERED_TILES = st.sampled_from([tuning.WIDE_TILE, tuning.TALL_TILE,
                                     tuning.LARGE_TILE, tuning.SMALL_TILE])
else:               # several tiles each way, a ragged last slab; one and two warpgroups
    ORDERED_SIZES = st.tuples(st.integers(0, 1), st.integers(1, 2), st.integers(3, 7)).map(
        lambda s: (16 * s[0] + 8, 16 * s[1], 8 * s[2]))
    ORDERED_TILES = st.sampled_from([MmaTile(16, 16, 16, 16, 16, 2),
                                     WgmmaTile(64, 16, 16, 3, 1), WgmmaTile(128, 16, 16, 4, 2)])


@settings(max_examples=settings.default.max_examples if ON_GPU else 3)
@given(sizes=ORDERED_SIZES, transpose_a=st.booleans(), tile=ORDERED_TILES,
       splits=st.integers(2, 4), seed=SEEDS)
def test_ordered_split_k_adds_its_parts_in_order(sizes, transpose_a, tile, splits, seed):
    """Deterministic split-K: out is ((out + part 0) + part 1) + ... in float32, bit for
    bit, each part the product over its split's K (the same kernel, unsplit, into a
    poisoned out), and within TOL_F32_OP of float64; the turns are back at 0 after it, and
    a second launch gives the same bits."""
    check_ordered_split_k(*sizes, transpose_a, tile, splits, seed)


ORDERED_PERSISTENT_TILES = st.sampled_from(
    [tuning.COPIER_TILE, tuning.PINGPONG_TILE, tuning.PERSISTENT_TILE,
     tuning.NARROW_COPIER_TILE] if REAL_SHAPES
    else [PersistentTile(64, 16, 16, 3, 1),
          PersistentTile(128, 16, 16, 3, 2, copier=True, pingpong=True)])


@pytest.mark.parametrize("by_parts", [False, True], ids=["turns", "parts"])
@settings(max_examples=settings.default.max_examples if ON_GPU else 2)
@given(sizes=ORDERED_SIZES, transpose_a=st.booleans(), tile=ORDERED_PERSISTENT_TILES,
       splits=st.integers(2, 4), a_block_a_unit=st.booleans(), seed=SEEDS)
def test_persistent_ordered_split_k_adds_its_parts_in_order(sizes, transpose_a, tile, splits,
                                                            a_block_a_unit, by_parts, seed):
    """The persistent kernel's ordered split-K, as the test above, in turns (the "ordered"
    epilogue: each block walks items of several units and splits, on a GPU one block an
    SM, an item waiting for another block's; the simulator runs its blocks one after
    another, so there one block walks every item, or a block each unit walks its splits)
    or by parts (the "parts" epilogue into a workspace, then turns.add_parts): the same
    bits. Its splits sum one chain each."""
    splits = max(splits, -(-sizes[2] // tuning.MAX_CHAIN))
    tiles = -(-sizes[0] // tile.rows) * -(-sizes[1] // tile.cols)
    walk = (persistent.blocks if ON_GPU
            else (lambda items: tiles) if a_block_a_unit else (lambda items: 1))
    launched, launch = [], gemm_bf16._launch_persistent

    def recorded(*args):
        launched.append(args[7])            # its epilogue
        return launch(*args)
    with mock.patch.object(persistent, "blocks", walk), \
            mock.patch.object(tuning, "ordered_by_parts", lambda *args: by_parts), \
            mock.patch.object(gemm_bf16, "_launch_persistent", recorded):
        check_ordered_split_k(*sizes, transpose_a, tile, splits, seed)
    assert {"parts", "ordered"} & set(launched) == {"parts" if by_parts else "ordered"}


def check_ordered_split_k(M, N, K, transpose_a, tile, splits, seed):
    rng = np.random.default_rng(seed)
    a, a64, d_a = operand(rng, *((K, M) if transpose_a else (M, K)), False)
    b, b64, d_b = operand(rng, K, N, False)
    out0 = randn(rng, M, N)
    steps = -(-K // tile.depth)
    per_split = -(-steps // splits)
    expected = out0.astype(np.float32)
    for k0 in range(0, K, per_split * tile.depth):
        k1 = min(K, k0 + per_split * tile.depth)
        part = cuda.to_device(poisoned((M, N)))
        gemm_bf16.matmul_bf16(part, d_a[k0:k1] if transpose_a else d_a[:, k0:k1],
                              d_b[k0:k1], transpose_a, tile=tile, split_k=1)
        expected = expected + part.copy_to_host()
    what = f"ordered split-K {M}x{N}x{K} ta={transpose_a} {tile} {splits} splits"
    for _ in range(2):
        out = cuda.to_device(out0)
        gemm_bf16.matmul_bf16(out, d_a, d_b, transpose_a, accumulate=True, tile=tile,
                              split_k=splits, deterministic=True)
        got = out.copy_to_host()
        np.testing.assert_array_equal(got.view(np.uint32), expected.view(np.uint32), what)
        assert not split_turns(out, turn_units(M, N, tile)).copy_to_host().any(), what
    assert_close(got, out0 + (a64.T if transpose_a else a64) @ b64, TOL_F32_OP, what)


@pytest.mark.parametrize("in_groups", [True, False])
@settings(max_examples=2)
@given(M=st.integers(1, 5), groups=st.integers(1, 35), splits=st.integers(1, 4),
       spare=st.integers(0, 2), seed=SEEDS)
def test_add_parts_adds_the_splits_in_order(in_groups, M, groups, splits, spare, seed):
    """out += each part, ((out + part 0) + part 1) + ... in float32 bit for bit, part z
    the first M of rows z R .. z R + R - 1 (the rows past M poisoned: unread), a thread
    per 4 columns where N divides into them, else per column; a workspace of another
    shape refused."""
    N = 4 * groups if in_groups else 4 * groups - 1
    rng = np.random.default_rng(seed)
    rows = M + spare
    out0, parts = randn(rng, M, N), randn(rng, splits * rows, N)
    for z in range(splits):
        parts[z * rows + M:(z + 1) * rows] = np.nan
    expected = out0.copy()
    for z in range(splits):
        expected = expected + parts[z * rows:z * rows + M]
    out = cuda.to_device(out0)
    turns.add_parts(out, cuda.to_device(parts), splits)
    np.testing.assert_array_equal(out.copy_to_host().view(np.uint32), expected.view(np.uint32))
    with pytest.raises(ValueError, match="parts: expected"):
        turns.add_parts(out, cuda.to_device(np.ascontiguousarray(
            parts[:, :N - 1] if N > 1 else parts[:M - 1])), splits)


def turn_units(M, N, tile):
    """The ordered epilogue's turn counters: a warpgroup's rows of a tile each (a ping-pong
    tile's warpgroup has all of its rows; an mma.sync tile is one unit)."""
    groups = 1 if getattr(tile, "pingpong", False) else getattr(tile, "warpgroups", 1)
    return -(-M // tile.rows) * -(-N // tile.cols) * groups


@pytest.mark.skipif(not ON_GPU, reason="the simulator runs one block at a time: its splits "
                    "always add in the same order")
@pytest.mark.parametrize("split_k, tile", [
    (None, None), (3, None), (8, None), (None, tuning.TALL_TILE), (3, tuning.TALL_TILE),
    # (the persistent kernel sums a split in one chain: not 3 splits of 16384)
    (None, tuning.COPIER_TILE), (8, tuning.COPIER_TILE), (None, tuning.PINGPONG_TILE),
    (8, tuning.PINGPONG_TILE)], ids=["default", "3-default", "8-default", "tall", "3-tall",
                                      "copier", "8-copier", "pingpong", "8-pingpong"])
def test_ordered_split_k_gives_the_same_bits_every_run(split_k, tile):
    """An andrea-120m weight gradient (W_O's, 768 x 768 over K 16384) on the GPU, its
    split-K ordered (the launcher's tile; the wgmma kernel's tall one; the persistent
    kernel's two): the same bits in five launches and in two replays of a captured one
    (the turns left at 0 for the next)."""
    from microgpt.cuda_backend import CudaBackend

    backend = CudaBackend()
    rng = np.random.default_rng(11)
    M = N = 768
    K = 16384
    d_a, d_b = (operand(rng, K, n, False)[2] for n in (M, N))
    out0 = randn(rng, M, N)
    out = cuda.to_device(out0)

    def launch():
        gemm_bf16.matmul_bf16(out, d_a, d_b, True, accumulate=True, tile=tile,
                              split_k=split_k, deterministic=True, stream=backend.stream)
    runs = []
    for _ in range(5):
        out.copy_to_device(out0, stream=backend.stream)
        launch()
        runs.append(backend.to_host(out))
    graph = backend.capture(launch)
    for _ in range(2):
        out.copy_to_device(out0, stream=backend.stream)
        graph.replay()
        runs.append(backend.to_host(out))
    for run in runs[1:]:
        np.testing.assert_array_equal(run.view(np.uint32), runs[0].view(np.uint32))


def test_matmul_bf16_rejects_bad_arguments():
    def dev(*shape, dtype=np.uint16):
        return cuda.to_device(np.ones(shape, dtype))

    out, x, w = dev(4, 5, dtype=np.float32), dev(4, 16), dev(16, 5)
    with pytest.raises(ValueError, match="b: expected shape"):
        gemm_bf16.matmul_bf16(out, x, w, transpose_b=True)
    with pytest.raises(TypeError, match="a: expected dtype uint16"):
        gemm_bf16.matmul_bf16(out, dev(4, 16, dtype=np.float32), w)
    with pytest.raises(TypeError, match="out: expected dtype float32"):
        gemm_bf16.matmul_bf16(dev(4, 5, dtype=np.float64), x, w)
    with pytest.raises(ValueError, match="never accumulated"):
        gemm_bf16.matmul_bf16(dev(4, 5), x, w, accumulate=True)
    with pytest.raises(ValueError, match="split_k"):
        gemm_bf16.matmul_bf16(out, x, w, split_k=2)
    with pytest.raises(ValueError, match="multiples of 16"):
        gemm_bf16.matmul_bf16(out, x, w, tile=MmaTile(16, 16, 8, 16, 16, 2))
    with pytest.raises(ValueError, match="at least 2 stages"):
        gemm_bf16.matmul_bf16(out, x, w, tile=MmaTile(16, 16, 16, 16, 16, 1))
    with pytest.raises(ValueError, match="shared memory"):
        gemm_bf16.matmul_bf16(out, x, w, tile=MmaTile(128, 128, 64, 64, 64, 2))
    with pytest.raises(ValueError, match="more than 1024"):
        gemm_bf16.matmul_bf16(out, x, w, tile=MmaTile(256, 256, 16, 16, 32, 2))
    for tile, message in [((128, 64, 64, 4, 1), "64 per warpgroup"),
                          ((64, 48, 64, 4, 1), "cols must be"),
                          ((64, 64, 128, 4, 1), "depth must be"),
                          ((64, 64, 64, 2, 1), "at least 3 stages"),
                          ((256, 256, 64, 4, 4), "shared memory")]:
        with pytest.raises(ValueError, match=message):
            gemm_bf16.matmul_bf16(out, x, w, tile=WgmmaTile(*tile))
    with pytest.raises(ValueError, match="a row's elements must be adjacent"):
        gemm_bf16.matmul_bf16(out, dev(4, 32)[:, ::2], w)
    # rows of 5 float32 (20 bytes): not whole 16-byte chunks, which a tensor map needs
    with pytest.raises(ValueError, match="bulk tensor copies"):
        gemm_bf16.matmul_bf16(out, x, dev(16, 5), tile=WgmmaTile(64, 16, 16, 3, 1))
    # the GELU epilogues: a bf16 out written, and pre of its shape, only with them
    out16 = dev(4, 5)
    for kwargs, message in [({"gelu": "forward"}, "needs pre"),
                            ({"gelu": "sideways", "pre": out16}, "gelu='sideways'"),
                            ({"pre": out16}, "only the GELU epilogues"),
                            ({"gelu": "backward", "pre": dev(5, 4)}, "pre: expected shape")]:
        with pytest.raises(ValueError, match=message):
            gemm_bf16.matmul_bf16(out16, x, w, **kwargs)
    with pytest.raises(ValueError, match="bf16 out"):
        gemm_bf16.matmul_bf16(out, x, w, gelu="forward", pre=out16)
    with pytest.raises(ValueError, match="the GELU epilogues are the wgmma and persistent"):
        gemm_bf16.matmul_bf16(out16, x, w, gelu="backward", pre=out16,
                              tile=MmaTile(16, 16, 16, 16, 16, 2))


@pytest.mark.parametrize("M, N, K", [(0, 5, 16), (4, 0, 16), (4, 5, 0)])
@pytest.mark.parametrize("accumulate", [False, True])
def test_empty_products(M, N, K, accumulate, request):
    """The empty-input rule of kernels/common.py: an empty output launches nothing; an
    empty K makes out zero, or leaves an accumulated out as it was (a sum of nothing)."""
    if M * N == 0:
        request.getfixturevalue("no_launches")
    rng = np.random.default_rng(1)
    out0 = randn(rng, M, N)
    out = cuda.to_device(out0)
    gemm_bf16.matmul_bf16(out, cuda.to_device(np.ones((M, K), np.uint16)),
                          cuda.to_device(np.ones((K, N), np.uint16)), accumulate=accumulate,
                          tile=MmaTile(16, 16, 16, 16, 16, 2))
    np.testing.assert_array_equal(out.copy_to_host(),
                                  out0 if accumulate or M * N == 0 else np.zeros((M, N)))


@pytest.mark.parametrize("tile", [MmaTile(16, 16, 16, 16, 16, 2),
                                  WgmmaTile(64, 16, 16, 3, 1)])
def test_block_order_covers_every_tile(tile):
    """More rows of tiles than one group of the block order (block_tile, and the wgmma
    kernel's grid), with a ragged last group, so every branch of its mapping writes its
    tile exactly once."""
    check_matmul_bf16((GROUP + 2) * tile.rows + 3, tile.cols + 8, 16, False,
                      False, "float32", tile, seed=3, split_k=None)


@pytest.mark.parametrize("transpose_a, transpose_b, tile", [
    (False, False, MmaTile(16, 16, 16, 16, 16, 2)),
    (True, True, MmaTile(16, 16, 16, 16, 16, 2)),
    (False, False, WgmmaTile(64, 16, 16, 3, 1)), (True, True, WgmmaTile(64, 16, 16, 3, 1))])
def test_folds_repeat_over_a_long_k(transpose_a, transpose_b, tile):
    """Enough slabs for two folds and a ragged last one (the Hypothesis sizes fold once);
    ragged rows where the bulk tensor copies allow them (the wgmma tile)."""
    M, N, ragged = (16, 16, 8) if isinstance(tile, WgmmaTile) else (13, 11, 5)
    K = (2 * FOLD_STEPS + 1) * tile.depth + ragged
    check_matmul_bf16(M, N, K, transpose_a, transpose_b, "bf16", tile, seed=4,
                      split_k=None, max_chain=tile.depth)


def test_the_matmul_op_sends_bf16_operands_here(monkeypatch):
    """kernels.gemm.matmul, the op the model calls, runs bf16 operands on the tensor cores:
    it calls matmul_bf16 with its defaults (so gives its bits; one launch, ~9 s of
    simulation, instead of a second one to compare with), within TOL_F32_OP of float64; a
    float32 GemmTile given with them is refused."""
    calls, launch = [], gemm_bf16.matmul_bf16

    def recorded(*args, **kwargs):
        calls.append((args, kwargs))
        return launch(*args, **kwargs)
    monkeypatch.setattr(gemm_bf16, "matmul_bf16", recorded)
    rng = np.random.default_rng(5)
    (a, a64), (b, b64) = bf16(randn(rng, 20, 40)), bf16(randn(rng, 40, 24))
    a, b = cuda.to_device(a), cuda.to_device(b)
    via_op = cuda.to_device(poisoned((20, 24)))
    gemm.matmul(via_op, a, b)
    assert calls == [((via_op, a, b, False, False, False, None),
                      {"split_k": None, "deterministic": False, "stream": 0})]
    assert_close(via_op.copy_to_host(), a64 @ b64, TOL_F32_OP, "the matmul op on bf16 operands")
    with pytest.raises(ValueError, match="a GemmTile is the float32 kernel's"):
        gemm.matmul(via_op, a, b, tile=fp32.default_tile(20, 24))


# the persistent kernel (gemm.persistent): a few blocks walking several tiles each (on a
# GPU, one an SM), every epilogue it takes, biased or not, views or matrices, with a
# copying warpgroup or without (clusters on a GPU only: the simulator's blocks run one
# after another)
PERSISTENT_TILES = st.sampled_from([tuning.PERSISTENT_TILE, tuning.CLUSTER_TILE,
                                    tuning.COPIER_TILE, tuning.PINGPONG_TILE] if REAL_SHAPES
                                   else [PersistentTile(64, 16, 16, 3, 1),
                                         PersistentTile(64, 16, 16, 3, 1, copier=True),
                                         PersistentTile(128, 16, 16, 3, 2, copier=True,
                                                        pingpong=True)])
PERSISTENT_SIZES = (st.tuples(st.integers(1, 4096), st.integers(1, 3072),
                              st.integers(1, 3072)) if REAL_SHAPES
                    else st.tuples(st.integers(1, 136), st.integers(1, 40),
                                   st.integers(1, 56)))


@settings(max_examples=12 if ON_GPU else 5)
@given(sizes=PERSISTENT_SIZES, transpose_a=st.booleans(), transpose_b=st.booleans(),
       epilogue=st.sampled_from(EPILOGUES), tile=PERSISTENT_TILES, blocks=st.integers(1, 3),
       biased=st.booleans(), chained=st.booleans(), pitched=st.booleans(), seed=SEEDS)
def test_persistent_kernel_matches_reference(sizes, transpose_a, transpose_b, epilogue,
                                             tile, blocks, biased, chained, pitched, seed):
    """Each block walks its items, a tile and a split of K each (in the simulator 1-3
    blocks, so that most walk several and the ring of stages runs from one into the
    next), with ragged edges; split-K given (2 splits), or (not chained) a float32 out
    written with a K longer than a chain, summed by split-K into zeros."""
    sizes = tuple(max(8, s // 8 * 8) for s in sizes)     # (the bulk copies need it)
    walk = persistent.blocks if ON_GPU else lambda tiles: min(tiles, blocks)
    short = epilogue == "float32" and not chained
    with mock.patch.object(persistent, "blocks", walk):
        check_matmul_bf16(*sizes, transpose_a, transpose_b, epilogue, tile, seed,
                          split_k={"accumulate": 1, "split_k": 2}.get(epilogue),
                          max_chain=2 * tile.depth if short
                          else tuning.MAX_CHAIN, pitched=pitched,
                          biased=biased and epilogue in ("float32", "bf16"))


@settings(**({} if ON_GPU else {"max_examples": 3}))   # (the GPU profile's)
@given(sizes=PERSISTENT_SIZES, tile=PERSISTENT_TILES, blocks=st.integers(1, 3), seed=SEEDS)
def test_persistent_gelu_epilogue_matches_reference(sizes, tile, blocks, seed):
    """The MLP's GELU forward in the persistent kernel's epilogue: pre and gelu of pre as
    stored, each box of a tile through the warpgroup's two buffers in turn."""
    sizes = tuple(max(8, s // 8 * 8) for s in sizes)     # (the bulk copies need it)
    walk = persistent.blocks if ON_GPU else lambda tiles: min(tiles, blocks)
    with mock.patch.object(persistent, "blocks", walk):
        check_matmul_gelu(*sizes, False, tile, seed)


@pytest.mark.parametrize("copier, pingpong", [(False, False), (True, False), (True, True)])
def test_two_warpgroups_walk_their_tiles(copier, pingpong):
    """A persistent tile of two computing warpgroups (as the GPU's), with a copying one or
    without, cooperative or in ping-pong, in the simulator too: one block walking two
    tiles (in ping-pong, one each), K of more slabs than stages."""
    tile = ((tuning.PINGPONG_TILE if pingpong else tuning.PERSISTENT_TILE) if ON_GPU
            else PersistentTile(128, 16, 16, 3, 2))._replace(copier=copier, pingpong=pingpong)
    with mock.patch.object(persistent, "blocks", lambda tiles: 1):
        check_matmul_bf16(2 * tile.rows - 8, tile.cols, 4 * tile.depth, False, True,
                          "bf16", tile, seed=3, split_k=None)


def test_the_persistent_kernel_refuses_what_it_does_not_run():
    x, w = cuda.to_device(np.zeros((64, 32), np.uint16)), cuda.to_device(
        np.zeros((32, 16), np.uint16))
    with pytest.raises(ValueError, match="sums a split in one chain .* split_k at least 2"):
        gemm_bf16.matmul_bf16(cuda.to_device(np.zeros((64, 256), np.uint16)), x,
                              cuda.to_device(np.zeros((32, 256), np.uint16)),
                              tile=PersistentTile(64, 256, 16, 3, 1), max_chain=16)
    # the GELU backward's epilogue is the wgmma kernel's alone (docs/gemm-bf16.md, row 24)
    out, pre = (cuda.to_device(np.zeros((64, 32), np.uint16)) for _ in range(2))
    with pytest.raises(ValueError, match="epilogue 'gelu_backward': the persistent kernel"):
        gemm_bf16.matmul_bf16(out, x, cuda.to_device(np.zeros((32, 32), np.uint16)),
                              transpose_b=True, gelu="backward", pre=pre,
                              tile=PersistentTile(64, 32, 16, 3, 1))


# (andrea-120m's LM head dX and dW apart: their float64 references take the most time)
PERSISTENT_PRODUCTS = [p for p in STEP_PRODUCTS
                       if not (p[0] in ("LM head dX", "LM head dW") and max(p[1], p[3]) > 16384)]


@pytest.mark.skipif(not REAL_SHAPES, reason="the model's products need a GPU and real shapes")
@pytest.mark.parametrize("tile", [tuning.PERSISTENT_TILE, tuning.CLUSTER_TILE,
                                  tuning.COPIER_TILE, tuning.PINGPONG_TILE],
                         ids=lambda tile: f"cluster{tile.cluster}" + "-copier" * tile.copier
                         + "-pingpong" * tile.pingpong)
@pytest.mark.parametrize("product", PERSISTENT_PRODUCTS,
                         ids=lambda p: f"{p[0]} {p[1]}x{p[2]}x{p[3]}")
def test_step_products_persistent(product, tile):
    """The step's products with the persistent tiles and the launcher's split of K (the
    GELU backward's as a plain bf16 product: the persistent kernel has no such epilogue),
    one biased."""
    name, M, N, K, ta, tb, epilogue = product
    if epilogue == "gelu":
        return check_matmul_gelu(M, N, K, False, tile, seed=5)
    epilogue = "bf16" if epilogue == "gelu_backward" else epilogue
    check_matmul_bf16(M, N, K, ta, tb, epilogue, tile, seed=5, split_k=None,
                      biased=name == "QKV forward")
