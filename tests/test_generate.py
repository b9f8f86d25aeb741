"""Generation (microgpt/generate.py) against the full forward pass, on both backends: the
greedy tokens, batches of prompts of their own lengths, the window that slides when a
cache fills, a captured decoding step against an eager one; and the sampling CLI's bad
input."""
import re
import subprocess
import sys

import numpy as np
import pytest
from helpers import ON_GPU
from hypothesis import given, settings
from hypothesis import strategies as st

from microgpt import GPT, get_config
from microgpt import reference as ref
from microgpt.activations import HEAD_ROWS
from microgpt.errors import UserError
from microgpt.generate import PREFILL_STEP, Decoder, Sampling, generate, prefill_length

if ON_GPU:
    CONFIGS = [get_config("andrea-12m", n_layer=2), get_config("microgpt", vocab_size=40)]
    CUDA_EXAMPLES = settings().max_examples       # the profile's
    TOKENS = 12
else:   # a simulated step launches ~15 kernels of a few warps: a few examples only
    CONFIGS = [get_config("microgpt", vocab_size=20, d_model=8, n_head=2, context=5)]
    CUDA_EXAMPLES = 2
    TOKENS = 3
BACKENDS = ["numpy", "cuda"]
GREEDY = Sampling(temperature=0.0, top_k=0)
# a greedy token may differ from the float64 argmax only where the two largest logits are
# closer than float32's error in them (TOL_F32_MODEL of the logits' norm, relative)
NEAR_TIE = 1e-4


def models(backend, cfg, seed, precision="fp32"):
    """(the model under test, in precision on backend; the same parameters in float64 on
    NumPy). The parameters are redrawn at 3x GPT-2's scale, so attention is far from
    uniform."""
    model = GPT(cfg, backend=backend, seed=seed, precision=precision)
    state = {name: (t * 3 if t.ndim == 2 else t) for name, t in model.state_dict().items()}
    model.load_state_dict(state)
    oracle = GPT(cfg, backend="numpy", dtype=np.float64)
    oracle.load_state_dict(state)
    return model, oracle


def windows(cfg, prompt, tokens):
    """The documented rule: the window each token is predicted from (the prompt's newest
    context tokens; a window that reaches context + 1 tokens keeps its newest context // 2)."""
    window, out = list(prompt)[-cfg.context:], []
    for token in tokens:
        out.append(list(window))
        window.append(token)
        if len(window) > cfg.context:
            window = window[-max(1, cfg.context // 2):]
    return out


def assert_greedy(oracle, cfg, prompt, tokens):
    """Each token is the argmax of the float64 forward over its window's last position
    (or as near its max as float32 can tell)."""
    for window, token in zip(windows(cfg, prompt, tokens), tokens):
        logits = oracle.forward(np.array([window]))[0, -1]
        gap = logits.max() - logits[token]
        assert gap <= NEAR_TIE * np.linalg.norm(logits), (
            f"token {token} after {window}: {gap:.3g} below the largest logit")


@pytest.mark.parametrize("backend", BACKENDS)
def test_greedy_tokens_are_the_full_forwards(backend):
    @settings(max_examples=CUDA_EXAMPLES if backend == "cuda" else settings().max_examples,
              deadline=None)
    @given(cfg=st.sampled_from(CONFIGS), data=st.data(), seed=st.integers(0, 2**31))
    def check(cfg, data, seed):
        n = data.draw(st.integers(1, cfg.context + 2), label="prompt length")
        prompt = list(np.random.default_rng(seed).integers(0, cfg.vocab_size, n))
        model, oracle = models(backend, cfg, seed)
        tokens = generate(model, [prompt], TOKENS, GREEDY)[0]
        assert len(tokens) == TOKENS and all(0 <= t < cfg.vocab_size for t in tokens)
        assert_greedy(oracle, cfg, prompt, tokens)
    check()


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_batch_decodes_each_prompt_at_its_own_length(backend):
    """Prompts of different lengths in one batch (one of a single token, which has no
    prefill): each sequence's greedy tokens are the full forward's."""
    cfg = CONFIGS[-1]
    model, oracle = models(backend, cfg, 4)
    rng = np.random.default_rng(2)
    prompts = [list(rng.integers(0, cfg.vocab_size, n)) for n in (1, cfg.context - 1, 3)]
    batch = generate(model, prompts, TOKENS, GREEDY)
    for prompt, tokens in zip(prompts, batch):
        assert_greedy(oracle, cfg, prompt, tokens)


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_window_slides_when_the_cache_fills(backend):
    """A sequence generated well past the context: every token is the full forward's over
    the documented window (see windows())."""
    cfg = CONFIGS[-1]
    model, oracle = models(backend, cfg, 0)
    prompt = list(np.random.default_rng(1).integers(0, cfg.vocab_size, cfg.context + 2))
    n = cfg.context + 2 if backend == "numpy" or ON_GPU else cfg.context // 2 + 2
    tokens = generate(model, [prompt], n, GREEDY)[0]
    assert_greedy(oracle, cfg, prompt, tokens)


def test_both_backends_give_the_same_tokens():
    """On the same float32 weights, greedy and sampled: the NumPy backend (the reference)
    and the kernels, the same generator on both."""
    cfg = CONFIGS[-1]
    numpy_model, _ = models("numpy", cfg, 6)
    cuda_model, _ = models("cuda", cfg, 6)
    prompts = [[1, 2, 3], [4]]
    for sampling in (GREEDY, Sampling(temperature=1.0, top_k=5, seed=3)):
        assert (generate(numpy_model, prompts, TOKENS, sampling)
                == generate(cuda_model, prompts, TOKENS, sampling)), sampling


@pytest.mark.skipif(not ON_GPU, reason="the simulator captures no graph: every step is eager")
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_a_captured_step_gives_the_eager_steps_tokens(precision):
    cfg = CONFIGS[0]
    model, _ = models("cuda", cfg, 8, precision)
    prompts = [[5, 6, 7], [8], [9, 10]]
    sampling = Sampling(temperature=0.9, top_k=20, seed=11)
    eager = generate(model, prompts, 40, sampling, graph=False)
    captured = generate(model, prompts, 40, sampling)
    assert captured == eager
    assert Decoder(model, 1).graph and not Decoder(model, 1, graph=False).graph


@pytest.mark.skipif(not ON_GPU, reason="bf16 runs on the GPU's tensor cores")
def test_bf16_greedy_tokens_are_the_full_forwards_of_the_rounded_weights():
    """bf16 weights and cache: each greedy token is the argmax of the float64 forward fed
    the bf16-rounded matrices, or within bf16's error of it: four times the whole-model
    bf16 tolerance (2e-2 of the logits' norm) spread evenly, per logit."""
    import ml_dtypes

    cfg = CONFIGS[0]
    model = GPT(cfg, backend="cuda", precision="bf16", seed=2)
    state = {name: (t * 3 if t.ndim == 2 else t) for name, t in model.state_dict().items()}
    model.load_state_dict(state)
    oracle = GPT(cfg, backend="numpy", dtype=np.float64)
    oracle.load_state_dict({name: t.astype(ml_dtypes.bfloat16).astype(np.float32)
                            if t.ndim == 2 else t for name, t in state.items()})
    prompts = [list(np.random.default_rng(b).integers(0, cfg.vocab_size, 5 + 7 * b))
               for b in range(3)]
    for prompt, tokens in zip(prompts, generate(model, prompts, 20, GREEDY)):
        for window, token in zip(windows(cfg, prompt, tokens), tokens):
            logits = oracle.forward(np.array([window]))[0, -1]
            rms = np.linalg.norm(logits) / np.sqrt(logits.size)
            assert logits.max() - logits[token] <= 4 * 2e-2 * rms, (window, token)


@given(T=st.integers(1, 2048), context=st.integers(1, 2048))
def test_prefills_pad_to_a_few_lengths(T, context):
    """A power of two up to PREFILL_STEP, then a multiple of it, never below T nor past the
    context (a context of 1024 has 22 lengths, a captured graph each)."""
    n = prefill_length(T, context)
    assert n == context if T >= context else T <= n <= context
    if n < context:
        assert n & (n - 1) == 0 if T <= PREFILL_STEP else n % PREFILL_STEP == 0
    assert len({prefill_length(t, 1024) for t in range(1, 1024)}) == 22


def test_a_stop_token_ends_its_sequence_alone():
    """A sequence ends at the stop token (kept as its last); the others go on."""
    cfg = get_config("microgpt", vocab_size=20, d_model=8, n_head=2, context=8)
    model, _ = models("numpy", cfg, 3)
    prompts = [[1, 2], [3, 4, 5]]
    free = generate(model, prompts, 6, GREEDY)
    stop = free[0][2]
    stopped = generate(model, prompts, 6, Sampling(temperature=0.0, top_k=0, stop_id=stop))
    assert stopped[0] == free[0][:free[0].index(stop) + 1]
    assert stopped[1] == (free[1][:free[1].index(stop) + 1] if stop in free[1] else free[1])


def test_tokens_are_streamed_as_they_come():
    cfg = CONFIGS[-1]
    model, _ = models("numpy", cfg, 1)
    seen = []
    new = generate(model, [[1], [2, 3]], 4, Sampling(seed=2), on_token=lambda b, t: seen.append(
        (b, t)))
    assert [t for b, t in seen if b == 0] == new[0] and [t for b, t in seen if b == 1] == new[1]
    assert [b for b, _ in seen] == [0, 1] * 4           # a token of each per step


def test_vocab_limit_keeps_to_the_tokenizer():
    cfg = get_config("microgpt", vocab_size=64)
    model = GPT(cfg, seed=1)
    new = generate(model, [[3, 4]], 30, Sampling(temperature=2.0, top_k=0, vocab_limit=10))
    assert all(0 <= t < 10 for t in new[0])


def test_weights_that_overflow_are_one_line():
    cfg = CONFIGS[-1]
    model = GPT(cfg, seed=0)
    model.load_state_dict({k: np.full_like(v, np.inf) for k, v in model.state_dict().items()})
    with pytest.raises(UserError, match="overflow to NaN or infinity"), \
            np.errstate(all="ignore"):
        generate(model, [[1]], 2, GREEDY)


# V: the vocabulary of the config under test (20 in the simulator, 40 on a GPU)
@pytest.mark.parametrize("prompts, n, sampling, message", [
    ([[]], 2, GREEDY, "at least one token"),
    ([[3, "V"]], 2, GREEDY, r"token ids must lie in \[0, V\)"),
    ([[3]], 0, GREEDY, "n_tokens must be at least 1"),
    ([[3]], 2, Sampling(top_p=0.0), r"top_p in \(0, 1\]"),
    ([[3]], 2, Sampling(temperature=-1.0), "temperature >= 0"),
    ([[3]], 2, "vocab_limit V + 1", r"vocab_limit must lie in \[1, V\]"),
])
def test_bad_generation_arguments_are_refused(prompts, n, sampling, message):
    V = CONFIGS[-1].vocab_size
    prompts = [[V if t == "V" else t for t in prompt] for prompt in prompts]
    if sampling == "vocab_limit V + 1":
        sampling = Sampling(vocab_limit=V + 1)
    with pytest.raises(ValueError, match=message.replace("V", str(V))):
        generate(GPT(CONFIGS[-1]), prompts, n, sampling)


def test_a_batch_past_the_heads_chunk_is_refused():
    # refused before any buffer is allocated: 8,193 one-token prompts cost nothing here
    with pytest.raises(UserError, match=f"at most {HEAD_ROWS} at once"):
        generate(GPT(CONFIGS[-1]), [[3]] * (HEAD_ROWS + 1), 2, GREEDY)


@pytest.mark.parametrize("args, message", [
    (["--top-p", "0"], r"--top-p must lie in \(0, 1\], got 0.0"),
    (["--top-p", "1.5"], r"--top-p must lie in \(0, 1\]"),
    (["--prompt", "a", "--prompts", "p.txt"], "--prompt and --prompts both given"),
    (["--prompts", "missing.txt"], "--prompts missing.txt: cannot read it"),
    (["--num-samples", "0"], "--num-samples: must be a positive integer"),
])
def test_bad_sampling_input_is_one_line_and_exit_2(args, message, tmp_path):
    result = subprocess.run([sys.executable, "-m", "microgpt.sample", "--checkpoint",
                             str(tmp_path / "none"), *args], capture_output=True, text=True,
                            cwd=tmp_path)
    assert result.returncode == 2 and result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and re.search(message, lines[0]), result.stderr


def test_reference_decoding_attention_is_the_training_attention():
    """reference.attention_decode at each sequence's position equals the training
    attention's row there (split, causal attention, merge over the whole sequence)."""
    rng = np.random.default_rng(0)
    B, S, H, D = 3, 6, 2, 3
    C = H * D
    qkv = rng.standard_normal((B, S, 3 * C))
    q, k, v = ref.split_heads_forward(qkv, H)
    full = ref.merge_heads_forward(ref.attention_forward(q, k, v)[0])
    seq = np.array([[0, 5, 1, 0], [0, 0, 1, 0], [0, 3, 1, 0]])
    cache = np.full((B, S, 2 * C), np.nan)
    for b, pos in enumerate(seq[:, ref.POSITION]):
        cache[b, :pos] = ref.kv_cache_rows(qkv[b:b + 1, :pos])[0]
    step = np.stack([qkv[b, pos] for b, pos in enumerate(seq[:, ref.POSITION])])[:, None]
    out, written = ref.attention_decode(cache, step, seq, H)
    for b, pos in enumerate(seq[:, ref.POSITION]):
        np.testing.assert_allclose(out[b][0], full[b, pos], rtol=1e-12, atol=1e-12)
        np.testing.assert_array_equal(written[b, pos], ref.kv_cache_rows(qkv[b:b + 1])[0, pos])
