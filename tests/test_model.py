"""The whole model on the NumPy backend (microgpt/model.py): gradients, learning, the API."""
import math

import numpy as np
import pytest
from helpers import assert_close
from hypothesis import example, given, settings
from hypothesis import strategies as st

from microgpt import GPT, activations, reference as ref
from microgpt.activations import (RECOMPUTE_MODES, RECOMPUTED, Buffers, activation_specs,
                                  arena_layout, head_rows)
from microgpt.backend import get_backend
from microgpt.config import GPTConfig, get_config
from microgpt.optim import AdamW, AdamWConfig, lr_at
from microgpt.step import step_specs

CPU = settings(settings.get_profile("cpu"))
TOL_FD = 1e-6        # float64 backward vs central differences, per parameter tensor
FD_STEP = 1e-5
TINY = GPTConfig(n_layer=2, d_model=8, n_head=2, context=6, vocab_size=11)
# GPT-2's shape: biases in the linear layers, a vocabulary padded past its tokens
TINY_GPT2 = GPTConfig(n_layer=2, d_model=8, n_head=2, context=6, vocab_size=16, bias=True,
                      n_tokens=11)


def random_tokens(rng, cfg, B, T):
    """idx, targets (B, T): random tokens, so every row of wte in use gets some gradient."""
    return rng.integers(0, cfg.tokens, (B, T)), rng.integers(0, cfg.tokens, (B, T))


@pytest.mark.parametrize("recompute", ["all", "gelu", "off"])
@pytest.mark.parametrize("cfg", [TINY, TINY_GPT2], ids=["bias-free", "gpt2-like"])
def test_gradients_match_finite_differences_for_every_parameter(cfg, recompute):
    """Every parameter's gradient, the biases' too, against central differences; of a
    padded vocabulary, the padding's rows of wte get none (their logits take no part).
    recompute: the LayerNorms' and GELU's outputs (all) or GELU's alone (gelu) written
    again in the backward (arena scratch), or kept per layer by the forward (off)."""
    model = GPT(cfg, seed=0, dtype=np.float64, recompute=recompute)
    rng = np.random.default_rng(1)
    # GPT-2 init makes the gradient of most tensors tiny; larger weights make every one count
    model.load_state_dict({name: rng.standard_normal(t.shape) * 0.5
                           for name, t in model.state_dict().items()})
    idx, targets = random_tokens(rng, cfg, 2, cfg.context)      # T = context: every wpe row
    _, analytic = model.loss_and_grads(idx, targets)

    numerical = np.empty(model.layout.size)
    for i in range(model.layout.size):
        saved = model.params_flat[i]
        model.params_flat[i] = saved + FD_STEP
        up = model.evaluate(idx, targets)
        model.params_flat[i] = saved - FD_STEP
        down = model.evaluate(idx, targets)
        model.params_flat[i] = saved
        numerical[i] = (up - down) / (2 * FD_STEP)

    for name, expected in model.layout.views(numerical).items():
        assert_close(analytic[name], expected, TOL_FD, name)
    assert not analytic["wte"][cfg.tokens:].any()


@pytest.mark.parametrize("mode", ["gelu", "all"])
@pytest.mark.parametrize("cfg", [TINY, TINY_GPT2], ids=["bias-free", "gpt2-like"])
def test_recomputing_the_outputs_gives_the_same_bits(cfg, mode):
    """The backward that writes GELU's output again (gelu), or the LayerNorms' outputs too
    (all), gives the loss and the gradients of the one that reads them kept, bit for bit
    in float32: the NumPy backend recomputes them by the forward's own expressions (the
    CUDA kernels round the norm's output once differently: tests/test_cuda_model.py
    holds them to the step's tolerance). Random weights and tokens."""
    rng = np.random.default_rng()
    idx, targets = random_tokens(rng, cfg, 3, cfg.context)
    seed = int(rng.integers(2**31))
    runs = []
    for recompute in ("off", mode):
        model = GPT(cfg, seed=seed, recompute=recompute)
        loss, grads = model.loss_and_grads(idx, targets)
        assert model._acts.rewritten == set(RECOMPUTED[recompute])
        runs.append((loss, grads))
    (kept_loss, kept), (loss, grads) = runs
    assert loss == kept_loss
    for name in kept:
        np.testing.assert_array_equal(grads[name], kept[name], err_msg=name)


def test_a_recompute_mode_is_one_of_three():
    """GPT's recompute: a mode, True and False the "all" and "off" of the switch it once
    was; anything else refused."""
    assert RECOMPUTED == {"off": (), "gelu": ("fc_gelu",), "all": ("ln_1", "ln_2", "fc_gelu")}
    assert [GPT(TINY, recompute=m).recompute for m in ("off", "gelu", "all", True, False)] \
        == ["off", "gelu", "all", "all", "off"]
    with pytest.raises(ValueError, match="recompute must be one of off, gelu, all"):
        GPT(TINY, recompute="on")


@pytest.mark.parametrize("vocab_size", [11, 256, 4096])
def test_loss_at_init_is_close_to_ln_vocab(vocab_size):
    """Init logits are near zero (std ~0.02 * sqrt(d_model)), so the prediction is near
    uniform: the loss exceeds ln V by about half the logits' variance, ~0.003 here."""
    cfg = get_config("microgpt", vocab_size=vocab_size)
    model = GPT(cfg, seed=0)
    idx, targets = random_tokens(np.random.default_rng(2), cfg, 4, cfg.context)
    assert abs(model.evaluate(idx, targets) - math.log(vocab_size)) < 0.05


def test_a_few_dozen_adamw_steps_memorise_one_batch():
    cfg = GPTConfig(n_layer=2, d_model=16, n_head=2, context=8, vocab_size=11)
    model = GPT(cfg, seed=0)
    tokens = np.random.default_rng(3).integers(0, cfg.vocab_size, (2, cfg.context + 1))
    idx, targets = tokens[:, :-1], tokens[:, 1:]
    opt_cfg = AdamWConfig(lr=3e-2, total_steps=30)
    opt = AdamW(model, opt_cfg)
    first = model.evaluate(idx, targets)
    for step in range(opt_cfg.total_steps):
        model.forward_backward(idx, targets)
        opt.step(lr_at(step, opt_cfg))
    assert first > 2.0                                   # ln 11 = 2.40
    assert model.evaluate(idx, targets) < 0.1


def test_forward_backward_loss_matches_the_logits_and_grads_do_not_accumulate():
    model = GPT(TINY, seed=0)
    idx, targets = random_tokens(np.random.default_rng(4), TINY, 2, 5)
    logits = model.forward(idx).astype(np.float64)
    losses, _ = ref.crossentropy_forward(logits.reshape(-1, TINY.vocab_size), targets.reshape(-1))
    loss, grads = model.loss_and_grads(idx, targets)
    assert loss == pytest.approx(losses.mean(), rel=1e-6)
    assert model.evaluate(idx, targets) == pytest.approx(loss, rel=1e-6)
    _, again = model.loss_and_grads(idx, targets)
    for name in grads:
        np.testing.assert_array_equal(again[name], grads[name])


def test_init_is_gpt2s():
    cfg = GPTConfig(n_layer=4, d_model=64, n_head=4, context=64, vocab_size=512)
    state = GPT(cfg, seed=0).state_dict()
    residual_std = 0.02 / math.sqrt(2 * cfg.n_layer)
    for name, tensor in state.items():
        if name.endswith(".weight"):
            np.testing.assert_array_equal(tensor, 1.0, err_msg=name)
        elif name.endswith(".bias"):
            np.testing.assert_array_equal(tensor, 0.0, err_msg=name)
        else:
            std = residual_std if name.endswith(("attn.w_o", "mlp.w_proj")) else 0.02
            assert tensor.std() == pytest.approx(std, rel=0.05), name
            assert abs(tensor.mean()) < 0.1 * std, name


def test_same_seed_same_parameters_other_seed_others():
    a, b, c = GPT(TINY, seed=7), GPT(TINY, seed=7), GPT(TINY, seed=8)
    np.testing.assert_array_equal(a.params_flat, b.params_flat)
    assert not np.array_equal(a.params_flat, c.params_flat)


def test_state_dict_round_trip():
    source, target = GPT(TINY, seed=0), GPT(TINY, seed=1)
    state = source.state_dict()
    assert list(state) == [s.name for s in source.layout.specs]
    assert all(t.dtype == np.float32 for t in state.values())
    target.load_state_dict(state)
    for name, tensor in target.state_dict().items():
        np.testing.assert_array_equal(tensor, state[name], err_msg=name)
    idx = np.random.default_rng(5).integers(0, TINY.vocab_size, (2, 4))
    np.testing.assert_array_equal(target.forward(idx), source.forward(idx))
    # the state is a copy: changing it leaves the model alone
    state["wte"][...] = 0.0
    assert np.any(source.state_dict()["wte"] != 0.0)


@pytest.mark.parametrize("change, message", [
    (lambda s: s.pop("h.1.attn.w_o"), r"missing \['h.1.attn.w_o'\]"),
    (lambda s: s.update({"h.2.attn.w_o": s["h.1.attn.w_o"]}), r"unexpected \['h.2.attn.w_o'\]"),
    (lambda s: s.update({"wpe": s["wpe"][:-1]}), r"parameter wpe has shape \(5, 8\).*\(6, 8\)"),
])
def test_load_state_dict_rejects_wrong_names_and_shapes(change, message):
    model = GPT(TINY, seed=0)
    state = model.state_dict()
    change(state)
    before = model.state_dict()
    with pytest.raises(ValueError, match=message):
        model.load_state_dict(state)
    for name, tensor in model.state_dict().items():       # nothing was half-loaded
        np.testing.assert_array_equal(tensor, before[name], err_msg=name)


@pytest.mark.parametrize("idx, message", [
    (np.zeros((1, TINY.context + 1), np.int64), "sequence length 7 exceeds the model's context 6"),
    (np.full((1, 3), TINY.vocab_size), r"token indices must lie in \[0, 11\)"),
    (np.full((1, 3), -1), r"token indices must lie in \[0, 11\)"),
    (np.zeros(3, np.int64), r"token indices must be \(B, T\)"),
])
def test_forward_rejects_bad_tokens_with_a_clear_error(idx, message):
    with pytest.raises(ValueError, match=message):
        GPT(TINY, seed=0).forward(idx)


@st.composite
def configs(draw):
    """Small configs over the head_dims that matter: tensor-core 32, 64, fallback 4, 72."""
    head_dim, n_head = draw(st.sampled_from([4, 32, 64, 72])), draw(st.integers(1, 3))
    vocab_size = draw(st.integers(1, 20))
    return GPTConfig(n_layer=draw(st.integers(1, 2)), d_model=head_dim * n_head, n_head=n_head,
                     context=draw(st.integers(1, 8)), vocab_size=vocab_size,
                     bias=draw(st.booleans()),
                     n_tokens=draw(st.none() | st.integers(1, vocab_size)))


@CPU
@given(cfg=configs(), data=st.data(), seed=st.integers(0, 2**32 - 1))
def test_any_config_runs_and_its_grads_mirror_the_state_dict(cfg, data, seed):
    B, T = data.draw(st.integers(1, 2)), data.draw(st.integers(1, cfg.context))
    model = GPT(cfg, seed=seed)
    idx, targets = random_tokens(np.random.default_rng(seed), cfg, B, T)
    logits = model.forward(idx)
    assert logits.shape == (B, T, cfg.vocab_size) and np.all(np.isfinite(logits))
    loss, grads = model.loss_and_grads(idx, targets)
    assert np.isfinite(loss)
    state = model.state_dict()
    assert grads.keys() == state.keys()
    for name, grad in grads.items():
        assert grad.shape == state[name].shape, name
        assert np.all(np.isfinite(grad)), name


@example(N=16384)       # andrea-120m's and andrea-12m's steps: two chunks of 8192 rows
@example(N=8193)
@given(N=st.integers(1, 2 ** 18))
@CPU
def test_head_rows_chunk_the_rows(N):
    """A chunk of the head: all N rows up to HEAD_ROWS; else a multiple of 8 rows (each
    chunk then starts 16-byte aligned in a bf16 matrix) within HEAD_ROWS, in as few
    chunks as that allows."""
    rows = head_rows(N)
    if N <= activations.HEAD_ROWS:
        assert rows == N
    else:
        assert rows % 8 == 0 and rows <= activations.HEAD_ROWS
        assert -(-N // rows) == -(-N // activations.HEAD_ROWS)


@given(B=st.integers(1, 3), T=st.integers(1, 6), gpt2=st.booleans(), data=st.data())
@CPU
def test_the_head_in_chunks_gives_the_whole_batchs_losses_and_gradients(B, T, gpt2, data):
    """The head and the loss a chunk of rows at a time (HEAD_ROWS drawn: chunks of 8 rows
    or the whole batch) against one chunk, in float64: the logits, the evaluation's loss,
    the training loss and every gradient; the chunks add the head's dW in another order,
    so equal to float64's rounding."""
    cfg = TINY_GPT2 if gpt2 else TINY
    chunk = data.draw(st.integers(1, B * T), label="HEAD_ROWS")
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1), label="seed"))
    idx, targets = random_tokens(rng, cfg, B, T)
    runs = []
    for head_rows_at_most in (activations.HEAD_ROWS, chunk):
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(activations, "HEAD_ROWS", head_rows_at_most)
            model = GPT(cfg, seed=2, dtype=np.float64)
            runs.append((model.forward(idx), model.evaluate(idx, targets),
                         *model.loss_and_grads(idx, targets)))
            assert model._acts.logits.shape[0] == head_rows(B * T)
    (logits, evaluated, loss, grads), (logits_c, evaluated_c, loss_c, grads_c) = runs
    assert_close(logits_c, logits, 1e-13, "logits")      # (BLAS blocks by the shape)
    assert evaluated_c == pytest.approx(evaluated, rel=1e-13)
    assert loss_c == pytest.approx(loss, rel=1e-13)
    for name in grads:
        assert_close(grads_c[name], grads[name], 1e-13, name)


@pytest.mark.parametrize("recompute", ["all", "gelu", "off"])
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("name,B,T", [("andrea-120m", 16, 1024), ("andrea-12m", 64, 256),
                                      ("microgpt", 2, 7)])
def test_the_arenas_parts_share_memory_only_across_phases(precision, name, B, T, recompute):
    """Each part of the arena lies inside it, 256-byte aligned; two parts share bytes only
    where their phases do not hold one another (the head's logits and the blocks'
    scratch, the MLP's dfc and the attention's scratch), and the arena is as long as its
    longest phase. (The passes' use of the parts, each only in its phase, is what the
    whole model's finite differences above hold: a part written over while alive moves a
    gradient.)"""
    cfg = get_config(name, vocab_size=24) if name == "microgpt" else get_config(name)
    specs = activation_specs(cfg, B, T, precision, recompute=recompute)
    offsets, length = arena_layout(specs)
    parts = {s.name: s for s in specs if s.phase is not None}
    assert {s.name: s.shape for s in specs}["arena"] == (length,)
    spans = {}
    for part, s in parts.items():
        lo = offsets[part] * 4
        spans[part] = lo, lo + s.bytes_each
        assert lo % 256 == 0 and lo + s.bytes_each <= 4 * length, part
    for a in parts:
        for b in parts:
            pa, pb = parts[a].phase, parts[b].phase
            nested = pa[:len(pb)] == pb or pb[:len(pa)] == pa
            overlap = spans[a][0] < spans[b][1] and spans[b][0] < spans[a][1]
            assert a == b or not (nested and overlap), (a, b)
    assert max(hi for _, hi in spans.values()) > 4 * length - 256


def owned_arrays(buffers):
    """The arrays that own their memory among a Buffers' attributes, each once."""
    found = {}
    for value in vars(buffers).values():
        for array in value if isinstance(value, list) else [value]:
            if isinstance(array, np.ndarray) and array.base is None:
                found[id(array)] = array
    return list(found.values())


@pytest.mark.parametrize("recompute", ["all", "gelu", "off"])
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_the_specs_bytes_are_what_the_buffers_allocate(precision, recompute):
    """BufferSpec.nbytes, which the trainer's memory check sums, counts what Buffers
    allocates: a view (the bf16 heads) or another name (same_as) nothing, scratch shared
    by every layer once. (The old sum counted both per layer: 9.47 GiB for the buffers of
    andrea-120m's bf16 step of 16 sequences, which allocates 7.03.)"""
    cfg = GPTConfig(n_layer=3, d_model=8, n_head=2, context=6, vocab_size=11)
    specs = step_specs(cfg, 2, 5, precision, recompute=recompute)
    allocated = owned_arrays(Buffers(get_backend("numpy"), specs))
    assert sum(a.nbytes for a in allocated) == sum(s.nbytes for s in specs)
    assert len(allocated) == sum(s.allocations for s in specs)


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("name", ["andrea-12m", "andrea-120m"])
def test_recomputing_gelu_alone_saves_less_than_all_and_more_than_none(name, precision):
    """A step's bytes, at a random batch shape: recompute gelu takes the L per-layer
    buffers of fc_gelu out of what is allocated beside the arena, all the norms' L too;
    the arena grows by the scratch they take there instead (one part each, where the
    head's chunk of logits does not hold it already); so gelu's total lies strictly
    between off's and all's."""
    rng = np.random.default_rng()
    cfg = get_config(name)
    B, T = int(rng.integers(1, 9)), int(rng.integers(64, cfg.context + 1))
    specs = {m: step_specs(cfg, B, T, precision, recompute=m) for m in RECOMPUTE_MODES}
    total = {m: sum(s.nbytes for s in specs[m]) for m in specs}
    arena = {m: next(s.nbytes for s in specs[m] if s.name == "arena") for m in specs}
    size = {s.name: s.bytes_each for s in specs["off"]}
    beside = {m: total[m] - arena[m] for m in specs}
    assert beside["off"] - beside["gelu"] == cfg.n_layer * size["fc_gelu"]
    assert beside["gelu"] - beside["all"] == cfg.n_layer * (size["ln_1"] + size["ln_2"])
    assert arena["off"] <= arena["gelu"] <= arena["all"]
    assert arena["gelu"] - arena["off"] <= size["fc_gelu"] + 4 * activations.ARENA_ALIGN
    assert total["off"] > total["gelu"] > total["all"], (B, T, total)
