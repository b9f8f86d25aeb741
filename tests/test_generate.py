"""Generation with a KV cache (microgpt/generate.py) against the full forward pass."""
import numpy as np
import pytest
from helpers import ON_GPU, TOL_F32_MODEL, assert_close
from hypothesis import given, settings
from hypothesis import strategies as st

from microgpt import GPT, get_config
from microgpt import reference as ref
from microgpt.generate import KVCache, generate

if ON_GPU:
    CONFIGS = [get_config("andrea-12m", n_layer=2), get_config("microgpt", vocab_size=40)]
    CUDA_EXAMPLES = settings().max_examples       # the profile's
else:   # a simulated step launches ~15 kernels of ~50 threads: a few examples only
    CONFIGS = [get_config("microgpt", vocab_size=20, d_model=8, n_head=2, context=5)]
    CUDA_EXAMPLES = 2
BACKENDS = [pytest.param("numpy"), pytest.param("cuda")]


def models(backend, cfg, seed):
    """(the model under test, float32 on backend; the same parameters in float64 on NumPy).
    The parameters are redrawn at 3x GPT-2's scale, so attention is far from uniform."""
    model = GPT(cfg, backend=backend, seed=seed)
    state = {name: (t * 3 if t.ndim == 2 else t) for name, t in model.state_dict().items()}
    model.load_state_dict(state)
    oracle = GPT(cfg, backend="numpy", dtype=np.float64)
    oracle.load_state_dict(state)
    return model, oracle


@pytest.mark.parametrize("backend", BACKENDS)
def test_cached_logits_equal_the_full_forward(backend):
    @settings(max_examples=CUDA_EXAMPLES if backend == "cuda" else settings().max_examples)
    @given(cfg=st.sampled_from(CONFIGS), data=st.data(), seed=st.integers(0, 2**31))
    def check(cfg, data, seed):
        """The prefill's logits, then every appended position's, equal the logits of the
        same position in one forward pass over the whole sequence (float64)."""
        n = data.draw(st.integers(1, cfg.context), label="positions")
        prompt = data.draw(st.integers(1, n), label="prompt length")
        ids = list(np.random.default_rng(seed).integers(0, cfg.vocab_size, n))
        model, oracle = models(backend, cfg, seed)
        want = oracle.forward(np.array([ids]))[0]
        cache = KVCache(model)
        got = [cache.start(ids[:prompt])]
        got += [cache.append(token) for token in ids[prompt:]]
        assert_close(np.array(got), want[prompt - 1:], TOL_F32_MODEL, "cached logits")
    check()


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_window_slides_past_the_context(backend):
    """A prompt longer than the context keeps its newest tokens; past the context the window
    restarts from its newest half. At every step the window is a suffix of the sequence of at
    most context tokens, at least half of it once full, and the logits are the full
    forward's over exactly that window at positions 0 .."""
    cfg = CONFIGS[-1]
    context = cfg.context
    model, oracle = models(backend, cfg, 0)
    rng = np.random.default_rng(1)
    ids = list(rng.integers(0, cfg.vocab_size, context + 3))
    cache = KVCache(model)
    logits = cache.start(ids)
    assert cache.tokens == ids[-context:]
    for _ in range(context + 2):            # two slides
        assert_close(logits, oracle.forward(np.array([cache.tokens]))[0, -1], TOL_F32_MODEL,
                     f"window of {len(cache.tokens)}")
        ids.append(int(rng.integers(0, cfg.vocab_size)))
        logits = cache.append(ids[-1])
        assert ids[-len(cache.tokens):] == cache.tokens
        assert max(1, context // 2) <= len(cache.tokens) <= context


def test_generation_is_greedy_at_temperature_0_and_keeps_to_the_vocabulary():
    cfg = get_config("microgpt", vocab_size=64)
    model = GPT(cfg, seed=1)
    rng = np.random.default_rng()
    prompt = list(rng.integers(0, 64, 5))
    greedy = generate(model, prompt, 20, temperature=0, top_k=0, rng=rng, vocab_limit=64)
    cache = KVCache(model)
    logits = cache.start(prompt)
    for token in greedy:
        assert token == int(np.argmax(logits))
        logits = cache.append(token)
    assert generate(model, prompt, 20, temperature=1.0, top_k=1, rng=rng,
                    vocab_limit=64) == greedy
    limited = generate(model, prompt, 50, temperature=2.0, top_k=0, rng=rng, vocab_limit=10)
    assert all(0 <= t < 10 for t in limited)


@pytest.mark.parametrize("ids, message", [([], "at least one token"),
                                          ([3, 64], r"token ids must lie in \[0, 64\)")])
def test_bad_prompts_are_refused(ids, message):
    with pytest.raises(ValueError, match=message):
        KVCache(GPT(get_config("microgpt", vocab_size=64))).start(ids)


@given(seed=st.integers(0, 2**31), start=st.integers(0, 5), T=st.integers(1, 4),
       n_head=st.sampled_from([1, 2, 3]))
@settings(max_examples=30)
def test_reference_cached_attention_is_the_training_attention(seed, start, T, n_head):
    """The reference of the cache (reference.attention_cached_forward) over the positions
    start .. start+T-1 equals the training attention's rows there: split, causal attention,
    merge over the whole sequence."""
    rng = np.random.default_rng(seed)
    qkv = rng.standard_normal((2, start + T, 3 * 2 * n_head))
    q, k, v = ref.split_heads_forward(qkv, n_head)
    want = ref.merge_heads_forward(ref.attention_forward(q, k, v)[0])[:, start:]
    kv = np.full((2, start + T + 2, 4 * n_head), np.nan)     # positions past the end unread
    kv[:, :start + T] = ref.kv_cache_rows(qkv)
    got = ref.attention_cached_forward(qkv[:, start:], kv, start, n_head)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
