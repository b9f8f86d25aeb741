"""AdamW on the flat parameter buffer and the learning-rate schedule (microgpt/optim.py)."""
import math

import numpy as np
import pytest
from helpers import TOL_F32_OP, assert_close
from hypothesis import given, settings
from hypothesis import strategies as st

from microgpt import GPT
from microgpt.config import GPTConfig
from microgpt.params import ParamLayout
from microgpt.optim import AdamW, AdamWConfig, lr_at

CPU = settings(settings.get_profile("cpu"))
TINY = GPTConfig(n_layer=2, d_model=8, n_head=2, context=6, vocab_size=11)
# one float64 formula evaluated by two programs; float32 is held to docs/design.md's op tolerance
TOL = {np.float64: 1e-12, np.float32: TOL_F32_OP}


# ----------------------------------------------------------------------------------
# the schedule

@st.composite
def schedules(draw):
    warmup = draw(st.integers(0, 50))
    return AdamWConfig(lr=draw(st.floats(1e-5, 1.0)), warmup_steps=warmup,
                       total_steps=warmup + draw(st.integers(1, 500)))


@CPU
@given(cfg=schedules())
def test_warmup_rises_linearly_to_the_peak(cfg):
    for step in range(cfg.warmup_steps):
        assert lr_at(step, cfg) == pytest.approx(cfg.lr * (step + 1) / cfg.warmup_steps)
    assert lr_at(cfg.warmup_steps, cfg) == pytest.approx(cfg.lr)


@CPU
@given(cfg=schedules())
def test_cosine_decays_monotonically_to_a_tenth_of_the_peak(cfg):
    after_warmup = [lr_at(s, cfg) for s in range(cfg.warmup_steps, cfg.total_steps + 10)]
    assert all(later <= earlier for earlier, later in zip(after_warmup, after_warmup[1:]))
    floor = cfg.min_lr_ratio * cfg.lr
    assert cfg.min_lr_ratio == 0.1
    assert lr_at(cfg.total_steps, cfg) == pytest.approx(floor)
    assert lr_at(cfg.total_steps + 1000, cfg) == pytest.approx(floor)
    span = cfg.total_steps - cfg.warmup_steps
    if span % 2 == 0:      # half way through the cosine: half way from the peak to the floor
        assert lr_at(cfg.warmup_steps + span // 2, cfg) == pytest.approx((cfg.lr + floor) / 2)


# ----------------------------------------------------------------------------------
# AdamW against a per-tensor computation written out here

def per_tensor_adamw(params, grad_steps, lrs, cfg):
    """AdamW tensor by tensor, from zero moments: -> params, m, v, [norm before clipping].

    params and each of grad_steps are {name: float64 array}. The clip is PyTorch's
    clip_grad_norm_: scale by max_norm / (norm + 1e-6) when that is below 1."""
    params = dict(params)
    m = {name: np.zeros_like(p) for name, p in params.items()}
    v = {name: np.zeros_like(p) for name, p in params.items()}
    norms = []
    for t, (grads, lr) in enumerate(zip(grad_steps, lrs), start=1):
        norm = math.sqrt(sum(float(np.sum(g * g)) for g in grads.values()))
        norms.append(norm)
        scale = min(1.0, cfg.max_norm / (norm + 1e-6))
        for name, p in params.items():
            g = grads[name] * scale
            m[name] = cfg.beta1 * m[name] + (1 - cfg.beta1) * g
            v[name] = cfg.beta2 * v[name] + (1 - cfg.beta2) * g * g
            m_hat, v_hat = m[name] / (1 - cfg.beta1 ** t), v[name] / (1 - cfg.beta2 ** t)
            decay = cfg.weight_decay if p.ndim == 2 else 0.0     # matrices only
            params[name] = p - lr * (m_hat / (np.sqrt(v_hat) + cfg.eps) + decay * p)
    return params, m, v, norms


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_adamw_on_the_flat_buffer_equals_per_tensor_adamw(dtype):
    model = GPT(TINY, seed=0, dtype=dtype)
    rng = np.random.default_rng(0)
    model.params_flat[:] = rng.standard_normal(model.layout.size)   # decay shows on every value
    start = {name: p.astype(np.float64) for name, p in model.params.items()}
    cfg = AdamWConfig()
    opt = AdamW(model, cfg)
    # global norms above and below max_norm, so some steps clip and some do not, and the
    # moments mix clipped and unclipped gradients
    # and a norm of 1e-6, where the clip's 1e-6 halves the scale, and one of 1e6
    grad_steps, lrs, norms = [], [0.05, 0.02, 0.04, 0.01, 0.03, 0.02, 0.05], []
    for target_norm, lr in zip([3.0, 0.4, 25.0, 0.9, 1.7, 1e-6, 1e6], lrs):
        flat = rng.standard_normal(model.layout.size)
        model.grads_flat[:] = flat * (target_norm / np.linalg.norm(flat))
        grad_steps.append({name: g.astype(np.float64) for name, g in model.grads.items()})
        norms.append(opt.step(lr))

    params, m, v, expected_norms = per_tensor_adamw(start, grad_steps, lrs, cfg)
    assert norms == pytest.approx(expected_norms, rel=TOL[dtype])
    moments, meta = opt.state_dict()
    assert meta == {"step": len(lrs)}
    got_m, got_v = model.layout.views(moments["m"]), model.layout.views(moments["v"])
    for name in params:
        assert_close(model.params[name], params[name], TOL[dtype], f"param {name}")
        assert_close(got_m[name], m[name], TOL[dtype], f"m {name}")
        assert_close(got_v[name], v[name], TOL[dtype], f"v {name}")


def test_the_defaults_are_the_design():
    """docs/design.md's AdamW: beta1 0.9, beta2 0.95, eps 1e-8, weight decay 0.1 (matrices
    only), global-norm clip 1.0, cosine to 10% of the peak."""
    cfg = AdamWConfig()
    assert (cfg.beta1, cfg.beta2, cfg.eps, cfg.weight_decay, cfg.max_norm, cfg.min_lr_ratio) \
        == (0.9, 0.95, 1e-8, 0.1, 1.0, 0.1)


def test_weight_decay_reaches_matrices_only():
    """With a zero gradient Adam's step is 0/(0 + eps) = 0: what moves is decay alone."""
    model = GPT(TINY, seed=0, dtype=np.float64)
    before = {name: p.copy() for name, p in model.params.items()}
    cfg = AdamWConfig(weight_decay=0.1)
    AdamW(model, cfg).step(0.5)
    for spec in model.layout.specs:
        kept = 1.0 - 0.5 * cfg.weight_decay if len(spec.shape) == 2 else 1.0
        np.testing.assert_allclose(model.params[spec.name], kept * before[spec.name],
                                   rtol=1e-14, err_msg=spec.name)


def test_clipping_leaves_a_gradient_below_max_norm_alone():
    clipped, unclipped = GPT(TINY, seed=0, dtype=np.float64), GPT(TINY, seed=0, dtype=np.float64)
    opt_clipped = AdamW(clipped, AdamWConfig(max_norm=1.0))
    opt_unclipped = AdamW(unclipped, AdamWConfig(max_norm=math.inf))
    rng = np.random.default_rng(1)
    for _ in range(3):
        flat = rng.standard_normal(clipped.layout.size)
        flat *= 0.5 / np.linalg.norm(flat)
        clipped.grads_flat[:], unclipped.grads_flat[:] = flat, flat
        opt_clipped.step(0.01)
        opt_unclipped.step(0.01)
    np.testing.assert_array_equal(clipped.params_flat, unclipped.params_flat)
    moments_clipped, moments_unclipped = opt_clipped.state_dict()[0], opt_unclipped.state_dict()[0]
    np.testing.assert_array_equal(moments_clipped["v"], moments_unclipped["v"])


def test_clipping_brings_a_large_gradient_to_max_norm():
    model = GPT(TINY, seed=0, dtype=np.float64)
    cfg = AdamWConfig(max_norm=1.0)
    opt = AdamW(model, cfg)
    flat = np.random.default_rng(2).standard_normal(model.layout.size)
    model.grads_flat[:] = flat * (40.0 / np.linalg.norm(flat))
    assert opt.step(0.01) == pytest.approx(40.0, rel=1e-12)
    clipped_grad = opt.state_dict()[0]["m"] / (1 - cfg.beta1)     # first step: m = (1-b1) g
    assert np.linalg.norm(clipped_grad) == pytest.approx(cfg.max_norm, rel=1e-6)


def test_optimizer_state_round_trip_continues_identically():
    rng = np.random.default_rng(3)
    grads = [rng.standard_normal(ParamLayout(TINY).size) for _ in range(3)]
    models = [GPT(TINY, seed=0, dtype=np.float64) for _ in range(2)]
    first, second = (AdamW(model, AdamWConfig()) for model in models)
    for g in grads[:2]:
        models[0].grads_flat[:] = g
        first.step(0.01)
    models[1].params_flat[:] = models[0].params_flat      # all of float64 (state_dict is float32)
    second.load_state_dict(*first.state_dict())
    for model, opt in zip(models, (first, second)):
        model.grads_flat[:] = grads[2]
        opt.step(0.01)
    np.testing.assert_array_equal(models[1].params_flat, models[0].params_flat)
    assert second.state_dict()[1] == {"step": 3}


def test_optimizer_state_of_another_size_is_rejected():
    opt = AdamW(GPT(TINY, seed=0), AdamWConfig())
    moments, meta = opt.state_dict()
    moments["v"] = moments["v"][:-1]
    with pytest.raises(ValueError, match="optimizer moment v has shape"):
        opt.load_state_dict(moments, meta)
