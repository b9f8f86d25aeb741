"""The device reductions (the sums, a bias's gradient as column sums, alone and with the
GELU's backward), the global gradient
norm and the fused clip + AdamW kernel against the float64 reference
(kernels/reductions.py, kernels/adamw.py).

AdamW's bf16 copy of the matrices is the float32 result rounded once: bit for bit the
kernel's own float32 parameter rounded to nearest even, and within TOL_BF16_OUT (helpers)
of the float64 reference."""
import ml_dtypes
import numpy as np
import pytest
from helpers import (BF16, REAL_SHAPES, TOL_BF16_OUT, TOL_F32_OP, assert_close, bf16,
                     from_bf16, poisoned, randn, to_device_off_group)
from hypothesis import given, settings
from hypothesis import strategies as st
from numba import cuda

from microgpt import reference as ref
from microgpt.backend import NumpyBackend
from microgpt.kernels import adamw, reductions

ANDREA_120M_PARAMS = 124_392_960
# flat lengths: tiny in the simulator; on a GPU up to a batch's losses (16384) for the sums
# and andrea-120m's whole parameter buffer for the optimizer, whose examples cost seconds of
# host reference each, hence fewer of them. On a GPU the simulator's own lengths are drawn
# too: small sizes where an out-of-range index shows in the simulator (IndexError) but
# passes unseen on a GPU unless compute-sanitizer watches.
SIM_LENGTHS = st.integers(1, 300)
if REAL_SHAPES:
    LENGTHS = st.one_of(st.just(16384), st.integers(1, 1 << 22), SIM_LENGTHS)
    PARAM_LENGTHS = st.one_of(st.just(ANDREA_120M_PARAMS), st.integers(1, 1 << 22), SIM_LENGTHS)
    REDUCE_BLOCKS = st.sampled_from([32, 256, 512, 1024])
    MAX_BLOCKS = st.sampled_from([1, 7, 1024])
    ADAMW_BLOCKS = st.sampled_from([32, 96, 256, 1024])
    ADAMW_MAX_BLOCKS = st.sampled_from([None, 1, 7])
    PARAM_EXAMPLES = settings(max_examples=max(1, settings().max_examples // 2))
else:
    LENGTHS = PARAM_LENGTHS = SIM_LENGTHS
    REDUCE_BLOCKS = st.just(32)
    MAX_BLOCKS = st.integers(1, 3)
    ADAMW_BLOCKS = st.sampled_from([32, 48])
    ADAMW_MAX_BLOCKS = st.sampled_from([None, 1, 2])
    PARAM_EXAMPLES = settings()
SEEDS = st.integers(0, 2**32 - 1)
# the gradient's global norm: tiny (where the clip's 1e-6 and Adam's 1e-8 epsilons are
# most of the arithmetic), as drawn (~sqrt(n)), huge
GRAD_NORMS = st.sampled_from([1e-6, None, 1e6])


@given(n=LENGTHS, block=REDUCE_BLOCKS, max_blocks=MAX_BLOCKS, seed=SEEDS)
def test_sum_to(n, block, max_blocks, seed):
    losses = np.random.default_rng(seed).uniform(0.1, 12.0, n).astype(np.float32)
    out = cuda.to_device(poisoned(1))
    reductions.sum_to(out, cuda.to_device(losses), block=block, max_blocks=max_blocks)
    assert_close(out.copy_to_host(), [losses.sum(dtype=np.float64)], TOL_F32_OP, "sum")


@given(n=LENGTHS, block=REDUCE_BLOCKS, max_blocks=MAX_BLOCKS, seed=SEEDS)
def test_sum_squares_to(n, block, max_blocks, seed):
    grad = randn(np.random.default_rng(seed), n)
    out = cuda.to_device(poisoned(1))
    reductions.sum_squares_to(out, cuda.to_device(grad), block=block, max_blocks=max_blocks)
    assert_close(out.copy_to_host(), [ref.global_norm(grad) ** 2], TOL_F32_OP, "sum of squares")


# a bias's gradient: (rows, columns) of a layer's output gradient. On a GPU andrea-120m's
# (16 x 1024 tokens; the widths of qkv, the projections and fc) and the simulator's; there,
# widths within a column tile and, a column a lane (widths that do not divide into groups:
# tiles of 32), across two; rows enough for the unrolled loop and its tail
if REAL_SHAPES:
    BIAS_SHAPES = st.one_of(st.tuples(st.just(16384), st.sampled_from([768, 2304, 3072])),
                            st.tuples(st.integers(1, 5000), st.integers(1, 3100)),
                            st.tuples(st.integers(1, 40), st.integers(1, 70)))
    BIAS_BLOCKS = st.sampled_from([reductions.COLUMN_BLOCKS, 1, 7, 1024])
else:
    BIAS_SHAPES = st.tuples(st.integers(1, 24), st.integers(1, 70))
    BIAS_BLOCKS = st.sampled_from([reductions.COLUMN_BLOCKS, 1, 3])


@given(shape=BIAS_SHAPES, low=st.booleans(), max_blocks=BIAS_BLOCKS,
       beside=st.sampled_from([0, 0, 3, 8]), seed=SEEDS)
def test_bias_backward(shape, low, max_blocks, beside, seed):
    """dbias += the column sums of dout (float32, or bf16 as the mixed-precision step's
    dfc and dqkv): added to what dbias held, the same bits on a second call. beside:
    dout is the first columns of rows that many wider (the QKV bias's q part of dqkv;
    3: rows that do not start on a group), the columns beside it drawn too."""
    rng = np.random.default_rng(seed)
    N, M = shape
    wide, before = randn(rng, N, M + beside), randn(rng, M)
    bits, values = bf16(wide) if low else (wide, wide.astype(np.float64))
    dout = cuda.to_device(bits)[:, :M]
    dbias = cuda.to_device(before)
    reductions.bias_backward(dbias, dout, max_blocks=max_blocks)
    want = before + ref.bias_backward(values[:, :M])
    got = dbias.copy_to_host()
    assert_close(got, want, TOL_F32_OP, "dbias")
    again = cuda.to_device(before)
    reductions.bias_backward(again, dout, max_blocks=max_blocks)
    np.testing.assert_array_equal(again.copy_to_host(), got)


@pytest.mark.parametrize("changes,message", [
    (dict(dout=np.zeros((3, 4), np.float64)), "dout: expected dtype float32 or bf16"),
    (dict(dbias=np.zeros(5, np.float32)), r"dbias: expected shape \(4,\)"),
    (dict(dout=np.zeros(4, np.float32)), r"dout: expected shape \(N, M\)"),
])
def test_bias_backward_rejects_bad_arguments(changes, message):
    args = {"dbias": np.zeros(4, np.float32), "dout": np.ones((3, 4), np.float32), **changes}
    with pytest.raises((ValueError, TypeError), match=message):
        reductions.bias_backward(**{k: cuda.to_device(v) for k, v in args.items()})


def check_gelu_bias_backward(shape, dtypes, in_place, max_blocks, seed, place=cuda.to_device):
    """dinp = dout * gelu'(inp) and dbias += its column sums, in one launch; dtypes (dinp,
    dout, inp) float32 or bf16; in_place: dinp is dout. The reference takes the bf16 inputs'
    rounded values: dinp within TOL_F32_OP (TOL_BF16_OUT for a bf16 dinp, the float32
    product rounded), dbias, float32 sums of the float32 products, within TOL_F32_OP; a
    second call the same bits. place: how inp goes to the device."""
    rng = np.random.default_rng(seed)
    dy, x, before = randn(rng, *shape), randn(rng, *shape, scale=3.0), randn(rng, shape[1])
    (dy, dy64), (x, x64) = (bf16(v) if dtype == BF16 else (v, v.astype(np.float64))
                            for v, dtype in zip((dy, x), dtypes[1:]))
    want = ref.gelu_backward(dy64, x64)
    got = []
    for _ in range(2):
        dout = cuda.to_device(dy)
        dinp = dout if in_place else cuda.to_device(poisoned(shape, dtypes[0]))
        dbias = cuda.to_device(before)
        reductions.gelu_bias_backward(dinp, dbias, dout, place(x), max_blocks=max_blocks)
        got.append(dbias.copy_to_host())
    assert_close(from_bf16(dinp.copy_to_host()) if dtypes[0] == BF16 else dinp.copy_to_host(),
                 want, TOL_BF16_OUT if dtypes[0] == BF16 else TOL_F32_OP, "dinp")
    assert_close(got[0], before + ref.bias_backward(want), TOL_F32_OP, "dbias")
    np.testing.assert_array_equal(got[1], got[0])


@given(shape=BIAS_SHAPES, dtypes=st.tuples(*[st.sampled_from([np.float32, BF16])] * 3),
       in_place=st.booleans(), max_blocks=BIAS_BLOCKS, seed=SEEDS)
def test_gelu_bias_backward(shape, dtypes, in_place, max_blocks, seed):
    """As the mixed-precision step runs it (bf16 throughout, dinp the GEMM's dout, in
    place), and every other mix of float32 and bf16."""
    check_gelu_bias_backward(shape, (dtypes[1],) + dtypes[1:] if in_place else dtypes,
                             in_place, max_blocks, seed)


def test_gelu_bias_backward_of_an_array_off_its_group():
    """inp one element past a group's boundary: no array is read in groups (a vector
    access must be aligned), though dout and dinp are aligned."""
    check_gelu_bias_backward((5, 8), (BF16, BF16, BF16), True, reductions.COLUMN_BLOCKS, 3,
                             place=to_device_off_group)


@pytest.mark.parametrize("changes,message", [
    (dict(inp=np.zeros((3, 5), np.float32)), r"inp: expected shape \(3, 4\)"),
    (dict(dinp=np.zeros((3, 4), np.float64)), "dinp: expected dtype float32 or bf16"),
    (dict(dbias=np.zeros(3, np.float32)), r"dbias: expected shape \(4,\)"),
    (dict(dout=np.zeros(4, np.float32)), r"dout: expected shape \(N, M\)"),
])
def test_gelu_bias_backward_rejects_bad_arguments(changes, message):
    args = {"dinp": np.zeros((3, 4), np.float32), "dbias": np.zeros(4, np.float32),
            "dout": np.ones((3, 4), np.float32), "inp": np.ones((3, 4), np.float32), **changes}
    with pytest.raises((ValueError, TypeError), match=message):
        reductions.gelu_bias_backward(**{k: cuda.to_device(v) for k, v in args.items()})


@PARAM_EXAMPLES
@given(n=PARAM_LENGTHS, block=REDUCE_BLOCKS, seed=SEEDS)
def test_global_norm_squared(n, block, seed):
    grad = randn(np.random.default_rng(seed), n, scale=1e-3)
    out = cuda.to_device(poisoned(1))
    adamw.global_norm_squared(out, cuda.to_device(grad), block=block)
    assert_close(out.copy_to_host(), [ref.global_norm(grad) ** 2], TOL_F32_OP, "norm squared")


def reference_step(param, grad, m, v, norm_squared, hp):
    """NumpyBackend.adamw_update's semantics in float64: the clip from norm_squared, decay on
    [0, n_decay) only."""
    param, m, v = (a.astype(np.float64) for a in (param, m, v))
    scale = ref.clip_scale(float(np.sqrt(np.float64(norm_squared))), hp["max_norm"])
    for part, wd in ((slice(0, hp["n_decay"]), hp["weight_decay"]),
                     (slice(hp["n_decay"], None), 0.0)):
        param[part], m[part], v[part] = ref.adamw_update(
            param[part], grad[part].astype(np.float64), m[part], v[part], lr=hp["lr"],
            step=hp["step"], weight_decay=wd, beta1=hp["beta1"], beta2=hp["beta2"],
            eps=hp["eps"], grad_scale=scale)
    return param, m, v


@PARAM_EXAMPLES
@given(n=PARAM_LENGTHS, decay_fraction=st.sampled_from([0.0, 1.0]) | st.floats(0.0, 1.0),
       clipped=st.booleans(), clip_ratio=st.floats(0.1, 0.9), grad_norm=GRAD_NORMS,
       step=st.integers(1, 10_000), lr=st.floats(1e-4, 1.0), weight_decay=st.floats(0.01, 0.5),
       beta1=st.floats(0.8, 0.95), beta2=st.floats(0.9, 0.999), block=ADAMW_BLOCKS,
       max_blocks=ADAMW_MAX_BLOCKS, bf16_copy=st.booleans(), seed=SEEDS)
def test_adamw_update(n, decay_fraction, clipped, clip_ratio, grad_norm, step, lr,
                      weight_decay, beta1, beta2, block, max_blocks, bf16_copy, seed):
    check_adamw(n, decay_fraction, clipped, clip_ratio, grad_norm, step, lr, weight_decay,
                beta1, beta2, block, seed, bf16_copy, max_blocks=max_blocks)


def check_adamw(n, decay_fraction, clipped, clip_ratio, grad_norm, step, lr, weight_decay,
                beta1, beta2, block, seed, bf16_copy=False, place=cuda.to_device, **launch):
    """block None: the launcher's default; bf16_copy: ask for the matrices in bf16 too;
    place: how param, grad, m and v go to the device; launch: the launcher's other launch
    arguments (max_blocks: a grid that strides)."""
    rng = np.random.default_rng(seed)
    param, grad = randn(rng, n), randn(rng, n)
    if grad_norm is not None:
        grad *= np.float32(grad_norm / np.linalg.norm(grad.astype(np.float64)))
    # moments on the gradient's scale, so that the new gradient shows in them
    grad_rms = np.float32(ref.global_norm(grad) / np.sqrt(n))
    m = randn(rng, n, scale=grad_rms)
    v = np.abs(randn(rng, n, scale=grad_rms * grad_rms))
    norm_squared = np.float32(ref.global_norm(grad) ** 2)
    norm = float(np.sqrt(np.float64(norm_squared)))
    # the clip is active when max_norm lies below the norm, inactive when above it
    max_norm = norm * clip_ratio if clipped else norm / clip_ratio
    hp = dict(weight_decay=weight_decay, n_decay=round(decay_fraction * n), max_norm=max_norm,
              beta1=beta1, beta2=beta2, eps=1e-8)
    hparams = np.array([step, lr, 1 - beta1 ** step, 1 - beta2 ** step], np.float32)
    d_param, d_m, d_v = place(param), place(m), place(v)
    d_bf16 = cuda.to_device(poisoned(hp["n_decay"], BF16)) if bf16_copy else None
    adamw.adamw_update(d_param, place(grad), d_m, d_v,
                       cuda.to_device(np.array([norm_squared])), cuda.to_device(hparams),
                       **({} if block is None else {"block": block}),
                       **({"param_bf16": d_bf16} if bf16_copy else {}), **hp, **launch)
    expected = reference_step(param, grad, m, v, norm_squared, dict(hp, lr=lr, step=step))
    terms = update_terms(param, grad, m, v, norm, dict(hp, lr=lr, step=step))
    for name, got, want in zip(("param", "m", "v"), (d_param, d_m, d_v), expected):
        assert_sum_close(got.copy_to_host(), want, terms[name], f"adamw {name}")
    if bf16_copy:
        matrices = slice(0, hp["n_decay"])
        got = d_bf16.copy_to_host()
        np.testing.assert_array_equal(
            got, d_param.copy_to_host()[matrices].astype(ml_dtypes.bfloat16).view(BF16))
        assert_sum_close(from_bf16(got), expected[0][matrices],
                         [t[matrices] for t in terms["param"]], "param_bf16",
                         rounding=TOL_BF16_OUT - TOL_F32_OP)


@pytest.mark.parametrize("n,decay_fraction,off_group", [(301, 0.5, False), (7, 0.3, False),
                                                        (300, 0.5, True)])
def test_adamw_in_groups_or_element_by_element(n, decay_fraction, off_group):
    """Four elements a thread by 16-byte accesses where every array starts on a group's
    boundary: n not a multiple of 4 (the last group short) and n_decay inside a group
    (150 of 301, 2 of 7: the bf16 copy's last group short); element by element for
    arrays off their group (a ZeRO-1 shard's view may start anywhere)."""
    check_adamw(n, decay_fraction, True, 0.5, None, 3, 1e-3, 0.1, 0.9, 0.95, 32, seed=n,
                bf16_copy=True, place=to_device_off_group if off_group else cuda.to_device)


def update_terms(param, grad, m, v, norm, hp):
    """The magnitudes (float64, per element) of the terms that AdamW's float32 results
    sum: m = beta1 m + (1 - beta1) g, v likewise, param = p - lr (m_hat / (sqrt(v_hat) +
    eps) + decay p), with m_hat taken at the size of m's terms (m may cancel too)."""
    param, grad, m, v = (a.astype(np.float64) for a in (param, grad, m, v))
    g = grad * ref.clip_scale(norm, hp["max_norm"])
    m_terms = (hp["beta1"] * np.abs(m), (1 - hp["beta1"]) * np.abs(g))
    v_terms = (hp["beta2"] * v, (1 - hp["beta2"]) * g * g)
    v_hat = (v_terms[0] + v_terms[1]) / (1 - hp["beta2"] ** hp["step"])
    m_hat = (m_terms[0] + m_terms[1]) / (1 - hp["beta1"] ** hp["step"])
    decay = np.where(np.arange(param.size) < hp["n_decay"], hp["weight_decay"], 0.0)
    update = hp["lr"] * m_hat / (np.sqrt(v_hat) + hp["eps"])
    return {"param": (np.abs(param), update, hp["lr"] * decay * np.abs(param)),
            "m": m_terms, "v": v_terms}


def assert_sum_close(got, want, terms, what, rounding=0.0):
    """got, a float32 sum of terms, against want, the float64 sum. A sum's rounding error
    is relative to its terms, not to the sum, which cancels where they nearly do (a
    parameter and its step at n = 1: 0.126 - 0.126 = -4e-5 loses 1.7e-4 relative). So
    ||got - want|| <= TOL_F32_OP * the terms' norms, + rounding * ||want|| for a result
    rounded once more (2^-8 to bf16, TOL_BF16_OUT's other part); where nothing cancels
    this is docs/design.md's relative bound."""
    got = np.asarray(got, np.float64)
    err = np.linalg.norm(got - want) if np.all(np.isfinite(got)) else np.inf
    bound = TOL_F32_OP * sum(np.linalg.norm(t) for t in terms) + rounding * np.linalg.norm(want)
    assert err <= bound, f"{what}: error {err:.3e} > bound {bound:.3e}"


def test_numpy_adamw_writes_the_bf16_copy():
    """The twin: NumpyBackend.adamw_update rounds the updated first n_decay elements into
    param_bf16, and updates param, m and v as without it."""
    rng = np.random.default_rng(8)
    n, n_decay = 40, 25
    param, grad = randn(rng, n), randn(rng, n)
    m, v = randn(rng, n, scale=0.1), np.abs(randn(rng, n, scale=0.01))
    norm_squared = np.array([ref.global_norm(grad) ** 2], np.float32)
    hparams = np.array([3, 1e-2, 1 - 0.9 ** 3, 1 - 0.95 ** 3], np.float32)
    hp = dict(n_decay=n_decay, **HP)
    backend = NumpyBackend()
    plain = [a.copy() for a in (param, m, v)]
    backend.adamw_update(plain[0], grad, plain[1], plain[2], norm_squared, hparams, **hp)
    param_bf16 = np.full(n_decay, np.nan, ml_dtypes.bfloat16)
    backend.adamw_update(param, grad, m, v, norm_squared, hparams, param_bf16=param_bf16, **hp)
    for got, want in zip((param, m, v), plain):
        np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(param_bf16.view(BF16),
                                  param[:n_decay].astype(ml_dtypes.bfloat16).view(BF16))


def test_default_blocks():
    """The launchers' defaults, as the model launches them: one 512-thread block for the
    sums (block_sum needs whole warps), two 256-thread blocks for AdamW."""
    rng = np.random.default_rng(6)
    x = randn(rng, 300)
    out = cuda.to_device(poisoned(1))
    reductions.sum_to(out, cuda.to_device(x))
    assert_close(out.copy_to_host(), [x.sum(dtype=np.float64)], TOL_F32_OP, "sum")
    adamw.global_norm_squared(out, cuda.to_device(x))
    assert_close(out.copy_to_host(), [ref.global_norm(x) ** 2], TOL_F32_OP, "norm squared")
    check_adamw(300, 0.5, True, 0.5, None, 3, 1e-3, 0.1, 0.9, 0.95, None, seed=7)
    check_adamw(300, 0.5, True, 0.5, None, 3, 1e-3, 0.1, 0.9, 0.95, None, seed=7,
                bf16_copy=True)


@given(n=LENGTHS, max_blocks=MAX_BLOCKS, seed=SEEDS)
def test_a_sum_is_the_same_bits_every_time(n, max_blocks, seed):
    """The blocks' totals are summed in a fixed order, never by atomics in the order the
    blocks finish: a data-parallel world's ranks scale their updates by the gradient norm
    each computes, and must get the same bits (tests/test_distributed.py)."""
    x = cuda.to_device(randn(np.random.default_rng(seed), n))
    out = cuda.to_device(poisoned(1))
    sums = set()
    for _ in range(10 if REAL_SHAPES else 2):
        reductions.sum_squares_to(out, x, block=32, max_blocks=max_blocks)
        sums.add(out.copy_to_host().tobytes())
    assert len(sums) == 1


def test_a_sum_over_nothing_is_zero():
    """The empty-input rule (kernels/common.py): the identity is written over the poison."""
    empty = cuda.to_device(np.ones(0, np.float32))
    for launch in (reductions.sum_to, reductions.sum_squares_to, adamw.global_norm_squared):
        out = cuda.to_device(poisoned(1))
        launch(out, empty, block=32)
        np.testing.assert_array_equal(out.copy_to_host(), [0.0])


def test_adamw_of_no_parameters_launches_nothing(no_launches):
    empty = cuda.to_device(np.ones(0, np.float32))
    adamw.adamw_update(empty, empty, empty, empty, ones(1), ones(4), n_decay=0, **HP)
    adamw.adamw_update(empty, empty, empty, empty, ones(1), ones(4), n_decay=0,
                       param_bf16=ones(0, dtype=BF16), **HP)


def ones(*shape, dtype=np.float32):
    return cuda.to_device(np.ones(shape, dtype))


HP = dict(weight_decay=0.1, max_norm=1.0, beta1=0.9, beta2=0.95, eps=1e-8)


@pytest.mark.parametrize("changes,error,message", [
    (dict(param=ones(2, 5)), ValueError, r"param: expected a flat \(n,\) array"),
    (dict(grad=ones(9)), ValueError, r"grad: expected shape \(10,\)"),
    (dict(m=ones(1)), ValueError, r"m: expected shape \(10,\)"),
    (dict(v=ones(10, dtype=np.float64)), TypeError, "v: expected dtype float32"),
    (dict(param=np.ones(10, np.float32)), TypeError, "param: expected a device array"),
    (dict(norm_squared=ones(2)), ValueError, r"norm_squared: expected shape \(1,\)"),
    (dict(hparams=ones(3)), ValueError, r"hparams: expected shape \(4,\)"),
    (dict(n_decay=11), ValueError, r"n_decay must lie in \[0, 10\], got 11"),
    (dict(n_decay=-1), ValueError, r"n_decay must lie in \[0, 10\], got -1"),
    (dict(param_bf16=ones(10, dtype=BF16)), ValueError, r"param_bf16: expected shape \(5,\)"),
    (dict(param_bf16=ones(5)), TypeError, "param_bf16: expected dtype uint16, got float32"),
    (dict(param_bf16=np.ones(5, BF16)), TypeError, "param_bf16: expected a device array"),
    (dict(block=0), ValueError, "block size"),
    (dict(block=1025), ValueError, "block size"),
    (dict(max_blocks=0), ValueError, r"max_blocks must be at least 1 \(or None\), got 0"),
])
def test_adamw_rejects_bad_arguments(changes, error, message):
    args = dict(param=ones(10), grad=ones(10), m=ones(10), v=ones(10), norm_squared=ones(1),
                hparams=ones(4), n_decay=5, **HP)
    args.update(changes)
    arrays = [args.pop(name) for name in ("param", "grad", "m", "v", "norm_squared", "hparams")]
    with pytest.raises(error, match=message):
        adamw.adamw_update(*arrays, **args)


@pytest.mark.parametrize("launch", [reductions.sum_to, reductions.sum_squares_to])
@pytest.mark.parametrize("changes,message", [
    (dict(x=ones(2, 5)), r"x: expected a flat \(n,\) array"),
    (dict(out=ones(2)), r"out: expected shape \(1,\)"),
    (dict(block=0), "block size must be a multiple of 32"),
    (dict(block=48), "block size must be a multiple of 32"),
    (dict(block=1056), "block size must be a multiple of 32"),
    (dict(max_blocks=0), "max_blocks must be at least 1, got 0"),
])
def test_sums_reject_bad_arguments(launch, changes, message):
    args = dict(out=ones(1), x=ones(10))
    args.update(changes)
    with pytest.raises(ValueError, match=message):
        launch(args.pop("out"), args.pop("x"), **args)


def test_global_norm_squared_rejects_bad_arguments():
    with pytest.raises(ValueError, match=r"out: expected shape \(1,\)"):
        adamw.global_norm_squared(ones(10), ones(10))


# ----------------------------------------------------------------------------------
# the schedule of the hyper-parameters, and the metrics log (a captured step's two
# replacements for host scalars)

SCHEDULE = dict(lr=st.floats(1e-5, 1.0), warmup_steps=st.integers(0, 100),
                total_steps=st.integers(1, 100_000), min_lr_ratio=st.floats(0.0, 1.0),
                beta1=st.floats(0.8, 0.95), beta2=st.floats(0.9, 0.9999))


@settings(max_examples=30)
@given(step=st.integers(0, 200_000), **SCHEDULE)
def test_adamw_schedule(step, lr, warmup_steps, total_steps, min_lr_ratio, beta1, beta2):
    """From update `step` to step + 1: the learning rate of optim.lr_at's schedule and the
    bias corrections, against float64. The rate within 1e-6 of the peak lr (near the end of
    a cosine to 0 it is itself ~0, so relative to itself would ask for float64); the
    corrections within 1e-6 relative, also at step 1 with beta2 = 0.9999, where 1 - beta2
    has four digits to lose."""
    hparams = cuda.to_device(np.array([step, np.nan, np.nan, np.nan], np.float32))
    adamw.adamw_schedule(hparams, lr=lr, warmup_steps=warmup_steps, total_steps=total_steps,
                         min_lr_ratio=min_lr_ratio, beta1=beta1, beta2=beta2)
    got = hparams.copy_to_host().astype(np.float64)
    n = step + 1
    want_lr = ref.lr_schedule(step, lr=lr, warmup_steps=warmup_steps, total_steps=total_steps,
                              min_lr_ratio=min_lr_ratio)
    assert got[0] == n
    assert abs(got[1] - want_lr) <= 1e-6 * lr, (got[1], want_lr)
    for value, beta in zip(got[2:], (beta1, beta2)):
        want = -np.expm1(n * np.log1p(-(1.0 - beta)))
        assert abs(value - want) <= 1e-6 * want, (value, want)


def test_adamw_schedule_warms_up_then_decays():
    """Fixed values, so that a schedule shared by kernel and reference cannot drift
    together: lr 1.0, warmup 4, 12 steps, to 0.1 of the peak."""
    hparams = cuda.to_device(np.zeros(4, np.float32))
    rates = []
    for _ in range(13):
        adamw.adamw_schedule(hparams, lr=1.0, warmup_steps=4, total_steps=12, min_lr_ratio=0.1,
                             beta1=0.5, beta2=0.5)
        rates.append(hparams.copy_to_host()[1])
    np.testing.assert_allclose(rates[:5], [0.25, 0.5, 0.75, 1.0, 1.0], rtol=1e-6)
    np.testing.assert_allclose(rates[8], 0.55, rtol=1e-6)           # halfway: the mean
    np.testing.assert_allclose(rates[12:], [0.1], rtol=1e-6)         # past the end: the floor
    np.testing.assert_allclose(hparams.copy_to_host()[[0, 2]], [13, 1 - 0.5 ** 13], rtol=1e-6)


@pytest.mark.parametrize("changes,message", [
    (dict(hparams=ones(3)), r"hparams: expected shape \(4,\)"),
    (dict(warmup_steps=-1), "warmup_steps must be >= 0 and total_steps >= 1"),
    (dict(total_steps=0), "warmup_steps must be >= 0 and total_steps >= 1"),
])
def test_adamw_schedule_rejects_bad_arguments(changes, message):
    args = dict(hparams=ones(4), lr=1e-3, warmup_steps=0, total_steps=10, min_lr_ratio=0.1,
                beta1=0.9, beta2=0.95)
    args.update(changes)
    with pytest.raises(ValueError, match=message):
        adamw.adamw_schedule(args.pop("hparams"), **args)


@given(n=SIM_LENGTHS.filter(lambda n: n > 0), rows=st.integers(1, 5), step=st.integers(1, 40),
       block=REDUCE_BLOCKS, seed=SEEDS)
def test_record_step(n, rows, step, block, seed):
    """Row (step - 1) % rows of the log gets the step's mean loss, gradient norm and lr; the
    other rows keep what they held (poison, here)."""
    rng = np.random.default_rng(seed)
    losses = np.abs(randn(rng, n)) * np.float32(5.0)
    norm_squared, lr = np.float32(rng.uniform(0.1, 10.0)), np.float32(rng.uniform(1e-4, 1e-2))
    log = cuda.to_device(poisoned((rows, 3)))
    reductions.record_step(log, cuda.to_device(losses), cuda.to_device(np.array([norm_squared])),
                           cuda.to_device(np.array([step, lr, 0.5, 0.5], np.float32)),
                           block=block)
    got = log.copy_to_host()
    row = (step - 1) % rows
    assert_close(got[row], [losses.mean(dtype=np.float64), np.sqrt(np.float64(norm_squared)),
                            lr], TOL_F32_OP, "log row")
    assert np.isnan(np.delete(got, row, axis=0)).all()


@pytest.mark.parametrize("changes,message", [
    (dict(log=ones(4, 2)), r"log: expected shape \(rows, 3\)"),
    (dict(log=ones(0, 3)), r"log: expected shape \(rows, 3\)"),
    (dict(losses=ones(0)), "losses: a step has at least one token"),
    (dict(losses=ones(2, 5)), r"losses: expected a flat \(n,\) array"),
    (dict(norm_squared=ones(2)), r"norm_squared: expected shape \(1,\)"),
    (dict(hparams=ones(3)), r"hparams: expected shape \(4,\)"),
    (dict(block=48), "block size must be a multiple of 32"),
])
def test_record_step_rejects_bad_arguments(changes, message):
    args = dict(log=ones(4, 3), losses=ones(10), norm_squared=ones(1), hparams=ones(4))
    args.update(changes)
    arrays = [args.pop(name) for name in ("log", "losses", "norm_squared", "hparams")]
    with pytest.raises(ValueError, match=message):
        reductions.record_step(*arrays, **args)
