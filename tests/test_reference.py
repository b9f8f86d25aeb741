"""The NumPy reference (microgpt/reference.py), the oracle everything else is held to.

Every op's backward is checked against central finite differences in float64, through
sum(dy * f(x)) with a random upstream dy so that every output element counts; every op
run in float32 stays float32 and agrees with float64 to docs/design.md's 1e-5 (plus a few
float32 epsilons of the terms, for results that are differences of larger terms); then the
properties the seed documents state about the attention pipeline: the per-head and the
fused projections are one function, merge inverts split, W_O mixes heads as a sum of
per-head products, attention is causal and its weights are distributions.
"""
import math
from dataclasses import dataclass
from typing import Callable

import numpy as np
import pytest
from helpers import TOL_F32_OP, assert_close, rel_error
from hypothesis import given, settings
from hypothesis import strategies as st

from microgpt import GPT, reference as ref
from microgpt.config import GPTConfig

CPU = settings(settings.get_profile("cpu"))   # NumPy only: cheap enough for more examples
TOL_FD = 1e-6        # float64 backward vs central differences, ||a - b|| / ||b||
TOL_SAME = 1e-12     # one float64 value computed two ways (a different summation order)
FD_STEP = 1e-5       # truncation error ~ step^2, round-off ~ 1e-16 / step: both far below TOL_FD
# float32 rounding of a result that cancels, relative to the size of its terms: a few
# epsilons (attention's dq, dk: at most 2 eps seen over 80,000 draws). Without it a
# nearly one-hot softmax row at T = 2 fails 1e-5 relative in about 1 draw of 500.
F32_ROUNDING = 8 * np.finfo(np.float32).eps
SEEDS = st.integers(0, 2**32 - 1)
# the tensor-core head_dims 32 and 64 and the fallback ones (4, 72, odd sizes)
HEAD_DIMS = st.sampled_from([1, 3, 4, 32, 64, 72])


def draw_heads(draw):
    """(B, H, T, D), T kept short for the large head_dims so finite differences stay quick."""
    D = draw(HEAD_DIMS)
    T = draw(st.integers(1, 6 if D <= 8 else 3))
    return draw(st.integers(1, 2)), draw(st.integers(1, 3)), T, D


def numerical_gradient(loss, x, step=FD_STEP):
    """Central differences of the scalar loss() with respect to every element of x.

    loss reads x, which is perturbed in place one element at a time and restored."""
    assert x.flags.c_contiguous, "x must be contiguous so its flat view writes through"
    grad = np.empty_like(x)
    flat, grad_flat = x.reshape(-1), grad.reshape(-1)
    for i in range(flat.size):
        saved = flat[i]
        flat[i] = saved + step
        up = loss()
        flat[i] = saved - step
        down = loss()
        flat[i] = saved
        grad_flat[i] = (up - down) / (2 * step)
    return grad


# ----------------------------------------------------------------------------------
# every reference op as a case: drawn inputs, a forward and a backward

def no_cancellation(inputs, upstream):
    return {}


@dataclass
class OpCase:
    """forward(inputs) -> {output name: array}; backward(inputs, upstream) -> {input name:
    gradient}, where upstream holds d(loss)/d(output) for each of forward's outputs.

    cancelling_terms(inputs, upstream) -> {result name: array} names the results that are
    differences of larger terms, with the size of those terms: float32 rounds such a
    result to a few epsilons of the terms, not of itself ("dq", "dk" of attention)."""
    inputs: dict
    forward: Callable
    backward: Callable
    cancelling_terms: Callable = no_cancellation


def encoder_case(draw, rng):
    B, T = draw(st.integers(1, 2)), draw(st.integers(1, 5))
    V, C = draw(st.integers(1, 5)), draw(st.integers(1, 8))    # few tokens: repeats add up
    context = T + draw(st.integers(0, 2))                       # rows past T get no gradient
    idx = rng.integers(0, V, (B, T))

    def forward(p):
        return {"x": ref.encoder_forward(idx, p["wte"], p["wpe"])}

    def backward(p, dy):
        dwte, dwpe = ref.encoder_backward(dy["x"], idx, V, context)
        return {"wte": dwte, "wpe": dwpe}

    inputs = {"wte": rng.standard_normal((V, C)), "wpe": rng.standard_normal((context, C))}
    return OpCase(inputs, forward, backward)


def layernorm_case(draw, rng):
    # Not C = 2: a normalised pair is (-1, 1) whatever x is, so dx is only the eps term,
    # ~eps / var, and a relative error of it measures round-off.
    N, C = draw(st.integers(1, 6)), draw(st.integers(1, 24).filter(lambda c: c != 2))
    # rows with their own offset and spread, as a residual stream has
    x = rng.standard_normal((N, C)) * rng.uniform(0.5, 3.0, (N, 1)) + rng.normal(0, 2, (N, 1))

    def forward(p):
        return {"y": ref.layernorm_forward(p["x"], p["weight"], p["bias"])[0]}

    def backward(p, dy):
        _, mean, rstd = ref.layernorm_forward(p["x"], p["weight"], p["bias"])
        dx, dweight, dbias = ref.layernorm_backward(dy["y"], p["x"], p["weight"], mean, rstd)
        return {"x": dx, "weight": dweight, "bias": dbias}

    def cancelling_terms(p, dy):
        # x - mean cancels for rows far from zero; the backward's projection
        # dxhat - mean(dxhat) - xhat * mean(dxhat * xhat) cancels, most of all for small C
        _, mean, rstd = ref.layernorm_forward(p["x"], p["weight"], p["bias"])
        xhat = rstd[:, None] * (np.abs(p["x"]) + np.abs(mean)[:, None])      # |xhat|'s terms
        dxhat = np.abs(dy["y"] * p["weight"])
        dx = rstd[:, None] * (dxhat + dxhat.mean(-1, keepdims=True)
                              + xhat * (dxhat * xhat).mean(-1, keepdims=True))
        return {"y": xhat * np.abs(p["weight"]) + np.abs(p["bias"]), "dx": dx,
                "dweight": (np.abs(dy["y"]) * xhat).sum(0), "dbias": np.abs(dy["y"]).sum(0)}

    inputs = {"x": x, "weight": rng.standard_normal(C), "bias": rng.standard_normal(C)}
    return OpCase(inputs, forward, backward, cancelling_terms)


def matmul_case(draw, rng):
    N, K, M = (draw(st.integers(1, 8)) for _ in range(3))

    def forward(p):
        return {"y": ref.matmul_forward(p["x"], p["w"])}

    def backward(p, dy):
        dx, dw = ref.matmul_backward(dy["y"], p["x"], p["w"])
        return {"x": dx, "w": dw}

    return OpCase({"x": rng.standard_normal((N, K)), "w": rng.standard_normal((K, M))},
                  forward, backward)


def split_heads_case(draw, rng):
    B, H, T, D = draw_heads(draw)

    def forward(p):
        q, k, v = ref.split_heads_forward(p["qkv"], H)
        return {"q": q, "k": k, "v": v}

    def backward(p, dy):
        return {"qkv": ref.split_heads_backward(dy["q"], dy["k"], dy["v"])}

    return OpCase({"qkv": rng.standard_normal((B, T, 3 * H * D))}, forward, backward)


def merge_heads_case(draw, rng):
    B, H, T, D = draw_heads(draw)

    def forward(p):
        return {"out": ref.merge_heads_forward(p["y"])}

    def backward(p, dy):
        return {"y": ref.merge_heads_backward(dy["out"], H)}

    return OpCase({"y": rng.standard_normal((B, H, T, D))}, forward, backward)


def attention_case(draw, rng):
    B, H, T, D = draw_heads(draw)

    def forward(p):
        return {"out": ref.attention_forward(p["q"], p["k"], p["v"])[0]}

    def backward(p, dy):
        out, lse = ref.attention_forward(p["q"], p["k"], p["v"])
        dq, dk, dv = ref.attention_backward(dy["out"], p["q"], p["k"], p["v"], out, lse)
        return {"q": dq, "k": dk, "v": dv}

    def cancelling_terms(p, dy):
        # dq and dk come from dS = P * (dout v^T - rowsum(dout * out)) / sqrt(D), which
        # cancels when a row of P is nearly one-hot (often at T = 2; always at T = 1,
        # where dq = dk = 0)
        weights, _ = ref.attention_weights(p["q"], p["k"])
        dout, v = np.abs(dy["out"]), np.abs(p["v"])
        out = np.abs(weights @ p["v"])
        terms = weights * (dout @ v.swapaxes(-1, -2) + (dout * out).sum(-1, keepdims=True))
        terms /= math.sqrt(D)
        return {"dq": terms @ np.abs(p["k"]), "dk": terms.swapaxes(-1, -2) @ np.abs(p["q"])}

    return OpCase({name: rng.standard_normal((B, H, T, D)) for name in "qkv"}, forward, backward,
                  cancelling_terms)


def residual_case(draw, rng):
    shape = (draw(st.integers(1, 2)), draw(st.integers(1, 5)), draw(st.integers(1, 8)))

    def forward(p):
        return {"y": ref.residual_forward(p["a"], p["b"])}

    def backward(p, dy):
        # the model routes the residual stream's gradient to both branches unchanged
        return {"a": dy["y"], "b": dy["y"]}

    return OpCase({"a": rng.standard_normal(shape), "b": rng.standard_normal(shape)},
                  forward, backward)


def gelu_case(draw, rng):
    def forward(p):
        return {"y": ref.gelu_forward(p["x"])}

    def backward(p, dy):
        return {"x": ref.gelu_backward(dy["y"], p["x"])}

    def cancelling_terms(p, dy):
        # 1 + tanh(u) and 1 - tanh(u)^2 cancel in the negative tail, where gelu is ~0
        x = p["x"]
        u = ref.GELU_SCALE * (x + 0.044715 * x ** 3)
        du = ref.GELU_SCALE * (1.0 + 3 * 0.044715 * x * x)
        t = np.abs(np.tanh(u))
        return {"y": np.abs(x), "dx": np.abs(dy["y"]) * (1.0 + np.abs(x) * du * (1.0 + t * t))}

    # at least 8 inputs: one alone deep in the negative tail has a gradient of ~1e-10, which
    # finite differences cannot resolve to 1e-6
    return OpCase({"x": rng.standard_normal(draw(st.integers(8, 64))) * 3.0}, forward, backward,
                  cancelling_terms)


def crossentropy_case(draw, rng):
    N, V = draw(st.integers(1, 8)), draw(st.integers(1, 12))
    targets = rng.integers(0, V, N)

    # The backward takes one scalar, d(loss)/d(mean loss) (the model's is 1), so the
    # upstream gradient here is a random scalar on the mean.
    def forward(p):
        losses, _ = ref.crossentropy_forward(p["logits"], targets)
        return {"loss": losses.mean()}

    def backward(p, dy):
        _, lse = ref.crossentropy_forward(p["logits"], targets)
        return {"logits": ref.crossentropy_backward(dy["loss"] / N, p["logits"], lse, targets)}

    def cancelling_terms(p, dy):
        # lse - logit[target] and softmax - 1 at the target cancel when the target is sure
        logits = p["logits"]
        _, lse = ref.crossentropy_forward(logits, targets)
        target_logit = np.abs(logits[np.arange(N), targets])
        probs_and_target = np.exp(logits - lse[:, None])
        probs_and_target[np.arange(N), targets] += 1.0
        return {"loss": (np.abs(lse) + target_logit + np.abs(logits).max(-1)).mean(),
                "dlogits": np.abs(dy["loss"]) / N * probs_and_target}

    return OpCase({"logits": rng.standard_normal((N, V)) * 2.0}, forward, backward,
                  cancelling_terms)


CASES = {"encoder": encoder_case, "layernorm": layernorm_case, "matmul": matmul_case,
         "split_heads": split_heads_case, "merge_heads": merge_heads_case,
         "attention": attention_case, "residual": residual_case, "gelu": gelu_case,
         "crossentropy": crossentropy_case}


def random_upstream(outputs, rng):
    return {name: rng.standard_normal(np.shape(out)) for name, out in outputs.items()}


@pytest.mark.parametrize("op", CASES)
@CPU
@given(data=st.data(), seed=SEEDS)
def test_backward_matches_finite_differences(op, data, seed):
    rng = np.random.default_rng(seed)
    case = CASES[op](data.draw, rng)
    upstream = random_upstream(case.forward(case.inputs), rng)

    def weighted_sum():
        outputs = case.forward(case.inputs)
        return sum(float(np.sum(upstream[name] * out)) for name, out in outputs.items())

    analytic = case.backward(case.inputs, upstream)
    assert analytic.keys() == case.inputs.keys()
    for name, x in case.inputs.items():
        assert_close(analytic[name], numerical_gradient(weighted_sum, x), TOL_FD, f"{op} d{name}")


@pytest.mark.parametrize("op", CASES)
@CPU
@given(data=st.data(), seed=SEEDS)
def test_float32_agrees_with_float64(op, data, seed):
    rng = np.random.default_rng(seed)
    case = CASES[op](data.draw, rng)
    upstream = random_upstream(case.forward(case.inputs), rng)

    # both runs start from the same float32-representable numbers
    inputs = {n: x.astype(np.float32).astype(np.float64) for n, x in case.inputs.items()}
    upstream = {n: np.asarray(u, np.float32).astype(np.float64) for n, u in upstream.items()}

    def run(dtype):
        x = {n: a.astype(dtype) for n, a in inputs.items()}
        dy = {n: u.astype(dtype) for n, u in upstream.items()}
        return {**case.forward(x), **{"d" + n: g for n, g in case.backward(x, dy).items()}}

    single, double = run(np.float32), run(np.float64)
    terms = case.cancelling_terms(inputs, upstream)
    for name, expected in double.items():
        assert np.asarray(single[name]).dtype == np.float32, f"{op} {name} left float32"
        error = np.linalg.norm(single[name] - expected)
        allowed = (TOL_F32_OP * np.linalg.norm(expected)
                   + F32_ROUNDING * np.linalg.norm(terms.get(name, 0.0)))
        assert error <= allowed, f"{op} {name}: error {error:.3e} > allowed {allowed:.3e}"


# ----------------------------------------------------------------------------------
# the attention pipeline's properties

@CPU
@given(data=st.data(), seed=SEEDS)
def test_per_head_projections_are_the_fused_projection_split_into_heads(data, seed):
    B, H, T, D = draw_heads(data.draw)
    C = H * D
    rng = np.random.default_rng(seed)
    x, w_qkv = rng.standard_normal((B, T, C)), rng.standard_normal((C, 3 * C))
    fused = ref.matmul_forward(x.reshape(B * T, C), w_qkv).reshape(B, T, 3 * C)
    for part, heads in zip(range(3), ref.split_heads_forward(fused, H)):   # q, k, v
        w = w_qkv[:, part * C:(part + 1) * C]                               # W_Q, W_K or W_V
        for h in range(H):
            own = x @ w[:, h * D:(h + 1) * D]                               # X W^h (B, T, D)
            assert rel_error(heads[:, h], own) < TOL_SAME, f"part {part} head {h}"


@CPU
@given(data=st.data(), seed=SEEDS)
def test_merge_inverts_split_and_each_backward_inverts_its_forward(data, seed):
    B, H, T, D = draw_heads(data.draw)
    rng = np.random.default_rng(seed)
    qkv, y = rng.standard_normal((B, T, 3 * H * D)), rng.standard_normal((B, H, T, D))
    q, k, v = ref.split_heads_forward(qkv, H)
    merged = np.concatenate([ref.merge_heads_forward(part) for part in (q, k, v)], axis=-1)
    np.testing.assert_array_equal(merged, qkv)
    np.testing.assert_array_equal(ref.split_heads_backward(q, k, v), qkv)
    np.testing.assert_array_equal(ref.merge_heads_backward(ref.merge_heads_forward(y), H), y)


@CPU
@given(data=st.data(), seed=SEEDS)
def test_output_projection_is_the_sum_of_per_head_products(data, seed):
    B, H, T, D = draw_heads(data.draw)
    C = H * D
    rng = np.random.default_rng(seed)
    y, w_o = rng.standard_normal((B, H, T, D)), rng.standard_normal((C, C))
    concat = ref.merge_heads_forward(y).reshape(B * T, C)
    per_head = sum(y[:, h].reshape(B * T, D) @ w_o[h * D:(h + 1) * D] for h in range(H))
    assert rel_error(ref.matmul_forward(concat, w_o), per_head) < TOL_SAME


@CPU
@given(data=st.data(), seed=SEEDS)
def test_attention_weights_are_causal_distributions(data, seed):
    B, H, T, D = draw_heads(data.draw)
    rng = np.random.default_rng(seed)
    q, k = (rng.standard_normal((B, H, T, D)) * 3.0 for _ in range(2))   # peaked rows too
    p, lse = ref.attention_weights(q, k)
    future = np.triu(np.ones((T, T), dtype=bool), k=1)
    assert np.all(p[..., future] == 0.0)
    assert np.all(p >= 0.0)
    np.testing.assert_allclose(p.sum(axis=-1), 1.0, rtol=0, atol=TOL_SAME)
    # lse is the log-normaliser the backward recomputes the weights from
    scores = q @ k.swapaxes(-1, -2) / math.sqrt(D)
    np.testing.assert_allclose(p[..., ~future], np.exp(scores - lse[..., None])[..., ~future],
                               rtol=TOL_SAME)


@CPU
@given(data=st.data(), seed=SEEDS)
def test_attention_output_up_to_t_ignores_inputs_after_t(data, seed):
    B, H, T, D = draw_heads(data.draw)
    t = data.draw(st.integers(0, T - 1))
    rng = np.random.default_rng(seed)
    q, k, v = (rng.standard_normal((B, H, T, D)) for _ in range(3))
    before, _ = ref.attention_forward(q, k, v)
    for x in (q, k, v):
        x[..., t + 1:, :] = rng.standard_normal(x[..., t + 1:, :].shape)
    after, _ = ref.attention_forward(q, k, v)
    assert rel_error(after[..., :t + 1, :], before[..., :t + 1, :]) < TOL_SAME


@CPU
@given(data=st.data(), seed=SEEDS)
def test_cached_attention_is_the_causal_attention_at_every_cache_length(data, seed):
    """Generation's attention (attention_cached_forward), fed one position at a time as
    decoding feeds it, against caches of 1, 2, ... n positions, gives each position the
    row that the training attention (split, causal attention, merge) gives it over the
    whole sequence; so does a chunk of positions after any prefix. The cache's rows past
    those written are NaN: attending one position too far shows, and so does masking the
    diagonal (a chunk's first row then attends to nothing, or misses itself)."""
    n_head, D = data.draw(st.integers(1, 3)), data.draw(st.sampled_from([1, 4, 8]))
    B, n = data.draw(st.integers(1, 2)), data.draw(st.integers(1, 6))
    C = n_head * D
    rng = np.random.default_rng(seed)
    qkv = rng.standard_normal((B, n, 3 * C))
    q, k, v = ref.split_heads_forward(qkv, n_head)
    want = ref.merge_heads_forward(ref.attention_forward(q, k, v)[0])     # (B, n, C)
    cache = np.full((B, n + 2, 2 * C), np.nan)
    for t in range(n):
        cache[:, t:t + 1] = ref.kv_cache_rows(qkv[:, t:t + 1])
        got = ref.attention_cached_forward(qkv[:, t:t + 1], cache, t, n_head)
        assert_close(got, want[:, t:t + 1], TOL_SAME, f"position {t}, {t + 1} cached")
    start = data.draw(st.integers(0, n - 1))
    got = ref.attention_cached_forward(qkv[:, start:], cache, start, n_head)
    assert_close(got, want[:, start:], TOL_SAME, f"positions {start}..{n - 1} in one chunk")


@CPU
@given(data=st.data(), seed=SEEDS)
def test_attention_delta_is_the_rowsum_of_dp_times_p(data, seed):
    """delta = rowsum(dout * out), what the backward op writes, is the softmax backward's
    rowsum(dP * P) with dP = dout v^T, because out = P v."""
    B, H, T, D = draw_heads(data.draw)
    rng = np.random.default_rng(seed)
    q, k, v, dout = (rng.standard_normal((B, H, T, D)) for _ in range(4))
    p, _ = ref.attention_weights(q, k)
    out, _ = ref.attention_forward(q, k, v)
    assert_close(ref.attention_delta(dout, out),
                 (dout @ v.swapaxes(-1, -2) * p).sum(axis=-1), TOL_SAME, "delta")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@CPU
@given(data=st.data(), seed=SEEDS)
def test_attention_over_one_position_copies_v_and_its_gradient(dtype, data, seed):
    B, H, _, D = draw_heads(data.draw)
    rng = np.random.default_rng(seed)
    q, k, v, dout = (rng.standard_normal((B, H, 1, D)).astype(dtype) for _ in range(4))
    out, lse = ref.attention_forward(q, k, v)
    np.testing.assert_array_equal(out, v)
    np.testing.assert_array_equal(ref.attention_backward(dout, q, k, v, out, lse)[2], dout)


@CPU
@given(data=st.data(), seed=SEEDS)
def test_model_logits_up_to_t_ignore_tokens_after_t(data, seed):
    cfg = GPTConfig(n_layer=2, d_model=8, n_head=2, context=6, vocab_size=11)
    model = GPT(cfg, seed=seed, dtype=np.float64)
    B, T = data.draw(st.integers(1, 2)), data.draw(st.integers(1, cfg.context))
    t = data.draw(st.integers(0, T - 1))
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, cfg.vocab_size, (B, T))
    before = model.forward(idx)
    idx[:, t + 1:] = rng.integers(0, cfg.vocab_size, (B, T - t - 1))
    after = model.forward(idx)
    assert rel_error(after[:, :t + 1], before[:, :t + 1]) < TOL_SAME


# ----------------------------------------------------------------------------------
# values written out: the constants the kernels import from here, pinned by value, since a
# change here changes both sides of every kernel-against-reference test

@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gelu_at_values_written_out(dtype):
    """tanh-GELU with sqrt(2/pi) and 0.044715; expected values from that float64 formula."""
    x = np.array([1.0, -1.0, 2.0, -3.0], dtype)
    assert_close(ref.gelu_forward(x), [0.8411919906082768, -0.15880800939172324,
                                       1.954597694087775, -0.0036373920817729943],
                 TOL_F32_OP, "gelu")
    assert_close(ref.gelu_backward(np.ones(4, dtype), x),
                 [1.0829640838457826, -0.08296408384578252, 1.0860992566236183,
                  -0.011584166630969516], TOL_F32_OP, "gelu'")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_layernorm_of_a_row_written_out(dtype):
    """eps = 1e-5 pinned: the row's variance, 1.15e-5, is near eps, so eps moves y."""
    x = np.array([[0.004, -0.001, 0.002, -0.005]], dtype)
    weight, bias = np.array([2.0, -1.0, 0.5, 3.0], dtype), np.array([0.5, 0.25, -0.75, 1.0], dtype)
    y, mean, rstd = ref.layernorm_forward(x, weight, bias)
    assert_close(y, [[2.225324371255015, 0.46566554640687685, -0.5343344535931231,
                      -2.234983196103152]], TOL_F32_OP, "y")
    assert_close(rstd, [215.6655464068768], TOL_F32_OP, "rstd")
    assert abs(mean[0]) < 1e-9


# ----------------------------------------------------------------------------------
# cross-entropy over logits spread far wider than exp's range

@pytest.mark.parametrize("dtype,spread", [(np.float32, 60.0), (np.float64, 600.0)])
@CPU
@given(N=st.integers(1, 4), V=st.integers(2, 300), seed=SEEDS)
def test_crossentropy_is_exact_at_any_spread(dtype, spread, N, V, seed):
    """Logits whose spread exceeds exp's range in this dtype (88 in float32, 709 in
    float64): the log-sum-exp must subtract the row max, and then max <= lse <= max + ln V,
    the loss is lse - logit[target] >= 0, and the softmax rows sum to 1."""
    rng = np.random.default_rng(seed)
    logits = (rng.standard_normal((N, V)) * spread).astype(dtype)
    targets = rng.integers(0, V, N)
    losses, lse = ref.crossentropy_forward(logits, targets)
    row_max = logits.max(axis=-1).astype(np.float64)
    assert np.all(np.isfinite(lse)) and np.all(np.isfinite(losses)), f"lse {lse}"
    slack = 4 * np.finfo(dtype).eps * np.abs(row_max)
    assert np.all(lse >= row_max - slack), f"lse {lse} below the row max {row_max}"
    assert np.all(lse <= row_max + math.log(V) + slack), f"lse {lse} above max + ln V"
    np.testing.assert_allclose(losses, lse - logits[np.arange(N), targets], rtol=0,
                               atol=4 * np.finfo(dtype).eps * np.abs(lse).max())
    dlogits = ref.crossentropy_backward(1.0, logits, lse, targets)
    np.testing.assert_allclose(dlogits.sum(axis=-1), 0.0, atol=1e-4 if dtype == np.float32
                               else TOL_SAME * V)


# ----------------------------------------------------------------------------------
# the learning-rate schedule, the gradient clip and AdamW (at tiny and huge gradient norms)

@pytest.mark.parametrize("norm,max_norm,scale", [
    (1e-6, 5e-7, 0.25),              # the 1e-6 in the denominator is half of it here
    (1e-7, 1e-8, 1e-8 / 1.1e-6),
    (4.0, 1.0, 1.0 / (4.0 + 1e-6)),
    (1e6, 1.0, 1.0 / (1e6 + 1e-6)),
    (1e30, 2.0, 2e-30),
    (0.5, 1.0, 1.0),                 # below max_norm: left alone
    (0.0, 1.0, 1.0),
])
def test_clip_scale_written_out(norm, max_norm, scale):
    """PyTorch's clip_grad_norm_: max_norm / (norm + 1e-6), at most 1."""
    assert ref.clip_scale(norm, max_norm) == pytest.approx(scale, rel=TOL_SAME)


def test_lr_schedule_written_out():
    """lr 1.0, 4 warmup steps, 12 steps in all, to 0.1 of the peak: the warmup adds a
    quarter of the peak per step, then the cosine runs from the peak (step 4) through a
    quarter (6), half (8) to the floor (12), and stays there."""
    cosine = {4: 1.0, 6: 0.1 + 0.45 * (1 + math.sqrt(0.5)), 8: 0.55, 12: 0.1, 13: 0.1,
              1000: 0.1}
    want = {0: 0.25, 1: 0.5, 2: 0.75, 3: 1.0, **cosine}
    got = {step: ref.lr_schedule(step, lr=1.0, warmup_steps=4, total_steps=12,
                                 min_lr_ratio=0.1) for step in want}
    assert got == pytest.approx(want, rel=TOL_SAME)
    # no warmup: the first step takes the peak
    assert ref.lr_schedule(0, lr=3.0, warmup_steps=0, total_steps=12, min_lr_ratio=0.1) == 3.0


@pytest.mark.parametrize("grad_size", [1e-9, 1e-8, 1.0, 1e6])
@CPU
@given(step=st.integers(1, 50), lr=st.floats(1e-4, 0.1), weight_decay=st.floats(0.0, 0.5),
       beta1=st.floats(0.5, 0.99), beta2=st.floats(0.5, 0.999), seed=SEEDS)
def test_adamw_with_a_constant_gradient_is_written_out(grad_size, step, lr, weight_decay,
                                                       beta1, beta2, seed):
    """The same gradient g at every step from zero moments: the bias corrections make
    m_hat = g and v_hat = g^2 exactly, so each step is p -= lr (g / (|g| + eps) + wd p),
    with m_t = (1 - beta1^t) g and v_t = (1 - beta2^t) g^2. Gradients of 1e-9 and 1e-8
    put Adam's eps (1e-8) in the result; 1e6 that nothing overflows."""
    rng = np.random.default_rng(seed)
    g = rng.standard_normal(6) * grad_size
    param = rng.standard_normal(6)
    m, v = np.zeros(6), np.zeros(6)
    expected = param.copy()
    for t in range(1, step + 1):
        param, m, v = ref.adamw_update(param, g, m, v, lr=lr, step=t, weight_decay=weight_decay,
                                       beta1=beta1, beta2=beta2)
        expected = expected - lr * (g / (np.abs(g) + 1e-8) + weight_decay * expected)
    assert_close(m, (1 - beta1 ** step) * g, TOL_SAME, "m")
    assert_close(v, (1 - beta2 ** step) * g * g, TOL_SAME, "v")
    assert_close(param, expected, 1e-10, "param")


@CPU
@given(grad_scale=st.sampled_from([1e-7, 0.3, 1.0, 1e6]), seed=SEEDS)
def test_adamw_grad_scale_scales_the_gradient(grad_scale, seed):
    """The clip enters AdamW as grad_scale: the same as a gradient scaled beforehand."""
    rng = np.random.default_rng(seed)
    param, grad, m = (rng.standard_normal(5) for _ in range(3))
    v = np.abs(rng.standard_normal(5))
    hp = dict(lr=0.01, step=3, weight_decay=0.1)
    scaled = ref.adamw_update(param, grad, m, v, grad_scale=grad_scale, **hp)
    for got, want in zip(scaled, ref.adamw_update(param, grad * grad_scale, m, v, **hp)):
        assert_close(got, want, TOL_SAME, "grad_scale")


def test_adamw_defaults_are_the_design():
    """beta1 0.9, beta2 0.95, eps 1e-8 (docs/design.md), by their effect on one step."""
    g, param = np.array([1e-8, -2.0]), np.array([0.5, 0.5])
    new, m, v = ref.adamw_update(param, g, np.zeros(2), np.zeros(2), lr=0.1, step=1,
                                 weight_decay=0.0)
    assert_close(m, 0.1 * g, TOL_SAME, "m: (1 - 0.9) g")
    assert_close(v, 0.05 * g * g, TOL_SAME, "v: (1 - 0.95) g^2")
    assert_close(new, param - 0.1 * np.array([0.5, -2.0 / (2.0 + 1e-8)]), TOL_SAME, "param")
