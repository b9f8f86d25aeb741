"""Sampling on the device (kernels/sampling.py): the kernel draws the reference's tokens
(the same counter-based generator), and the reference's draws follow the distribution
that temperature, top-k and top-p define (a chi-square over many draws, with a bound that
a wrong top-k or temperature exceeds); on a GPU, the kernel's own draws too."""
import numpy as np
import pytest
from helpers import ON_GPU, bf16, randn
from hypothesis import given
from hypothesis import strategies as st
from numba import cuda

from microgpt import reference as ref
from microgpt.kernels import sampling

SEEDS = st.integers(0, 2**32 - 1)
SETTINGS = st.tuples(st.sampled_from([0.0, 0.5, 1.0, 2.0]),      # temperature
                     st.sampled_from([0, 1, 3, 10, 100]),         # top_k
                     st.sampled_from([1.0, 0.9, 0.5, 0.05]))      # top_p
V_S = st.integers(1, 5000) if ON_GPU else st.integers(1, 40)
DRAWS = 20000


def states(rng, B, capacity):
    """Active sequences at random positions, and (B > 2) one done and one at capacity."""
    seq = np.zeros((B, len(ref.SEQ_COLUMNS)), np.int32)
    seq[:, ref.POSITION] = rng.integers(0, capacity, B)
    seq[:, ref.LEFT] = rng.integers(1, 4, B)
    seq[:, ref.DRAWN] = rng.integers(0, 100, B)
    if B > 2:
        seq[0, ref.LEFT] = 0
        seq[1, ref.POSITION] = capacity
    return seq


def launch(seq, logits, capacity, **kwargs):
    d_seq = cuda.to_device(seq)
    sampling.sample_tokens(d_seq, cuda.to_device(logits), capacity, **kwargs)
    return d_seq.copy_to_host()


@given(B=st.integers(1, 4), V=V_S, settings=SETTINGS, bf16_logits=st.booleans(),
       stop=st.booleans(), data=st.data(), seed=SEEDS)
def test_sample_tokens_draw_the_references_tokens(B, V, settings, bf16_logits, stop, data,
                                                  seed):
    temperature, top_k, top_p = settings
    rng = np.random.default_rng(seed)
    vocab = data.draw(st.integers(1, V), label="vocab")
    logits = randn(rng, B, V, scale=3.0)
    values = logits
    if bf16_logits:
        logits, values = bf16(logits)
    seq = states(rng, B, 8)
    stop_id = int(rng.integers(0, vocab)) if stop else -1
    kwargs = dict(vocab=vocab, temperature=temperature, top_k=top_k, top_p=top_p,
                  seed=seed, stop_id=stop_id)
    got = launch(seq, logits, 8, **kwargs)
    want = ref.sample_tokens(seq, values.astype(np.float32), 8, **kwargs)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_logits_that_are_not_finite_mark_the_sequence(temperature):
    logits = np.ones((2, 5), np.float32)
    logits[1, 3] = np.inf
    seq = np.array([[0, 0, 3, 0], [0, 0, 3, 0]], np.int32)
    got = launch(seq, logits, 4, temperature=temperature)
    assert got[1, ref.LEFT] == ref.NOT_FINITE and got[0, ref.LEFT] == 2


# ties where the thresholds fall, as bf16 rounding makes them in a real model: every logit
# equal; the largest twice (greedy's first, top-p 0.5 cutting between them), the fourth
# largest twice (top-k 4; its neighbours one bf16 step away)
TIES = np.array([[1.5] * 6, [2.0, 0.5, 2.0, 0.5078125, 0.5, 0.49609375]], np.float32)


@pytest.mark.parametrize("temperature, top_k, top_p, bf16_logits", [
    (0.0, 0, 1.0, True), (2.0, 4, 1.0, False), (1.0, 0, 0.5, True)])
def test_ties_at_the_thresholds_draw_the_references_tokens(temperature, top_k, top_p,
                                                           bf16_logits):
    """Greedy's first of the largest, a top-k or a top-p that cuts through tied logits
    (all kept): every sequence draws the reference's token and advances."""
    logits = bf16(TIES)[0] if bf16_logits else TIES     # (TIES are bf16 values)
    seq = np.array([[9, 0, 2, 5], [9, 1, 3, 0]], np.int32)
    kwargs = dict(vocab=6, temperature=temperature, top_k=top_k, top_p=top_p, seed=11,
                  stop_id=-1)
    got = launch(seq, logits, 4, **kwargs)
    np.testing.assert_array_equal(got, ref.sample_tokens(seq, TIES, 4, **kwargs))
    assert (got[:, ref.DRAWN] == seq[:, ref.DRAWN] + 1).all()


def test_top_k_finds_a_threshold_in_the_keys_last_byte():
    """Logits one float32 step apart on either side of 0 (keys that differ in their last
    byte only, and across the sign): top-k's threshold found through all four bytes; the
    draws, nearly uniform over the kept, are the reference's."""
    up = np.nextafter(np.float32(1), np.float32(2)) - np.float32(1)
    row = np.concatenate([1 + up * np.arange(5), -1 - up * np.arange(3)]).astype(np.float32)
    logits = np.tile(np.random.default_rng(2).permutation(row), (3, 1))
    seq = np.zeros((3, len(ref.SEQ_COLUMNS)), np.int32)
    seq[:, ref.LEFT] = 1
    kwargs = dict(vocab=8, temperature=1.0, top_k=3, top_p=1.0, seed=4, stop_id=-1)
    np.testing.assert_array_equal(launch(seq, logits, 2, **kwargs),
                                  ref.sample_tokens(seq, logits, 2, **kwargs))


@pytest.mark.parametrize("top_p, kept", [(0.35, 1), (0.45, 2), (0.75, 3), (0.95, 4)])
def test_top_p_keeps_the_smallest_set_that_reaches_it(top_p, kept):
    """Probabilities 0.4, 0.3, 0.2, 0.1 (and 0.1 more over the rest, far below): top-p
    keeps the fewest largest that sum to at least top_p, none near a cut; sixteen
    sequences' draws (their generators differ) are the reference's and among the kept,
    so a cut one token early or late fails."""
    probs = np.array([0.4, 0.3, 0.2, 0.1, 1e-9, 1e-9], np.float64)
    logits = np.tile(np.log(probs).astype(np.float32), (16, 1))
    seq = np.zeros((16, len(ref.SEQ_COLUMNS)), np.int32)
    seq[:, ref.LEFT] = 1
    kwargs = dict(vocab=probs.size, temperature=1.0, top_k=0, top_p=top_p, seed=5,
                  stop_id=-1)
    got = launch(seq, logits, 2, **kwargs)
    np.testing.assert_array_equal(got, ref.sample_tokens(seq, logits, 2, **kwargs))
    assert got[:, ref.TOKEN].max() < kept


def chi_square(counts, p):
    """Pearson's statistic of counts against probabilities p; infinite when a token of
    probability 0 was drawn."""
    expected = counts.sum() * p
    if np.any(counts[p == 0] > 0):
        return np.inf
    kept = p > 0
    return float(np.sum((counts[kept] - expected[kept]) ** 2 / expected[kept]))


def bound(df):
    """The chi-square's 1 - 1e-4 quantile (Wilson-Hilferty), df >= 1."""
    z = 3.719
    return df * (1 - 2 / (9 * df) + z * np.sqrt(2 / (9 * df))) ** 3


LOGITS = np.array([2.0, 1.6, 1.5, 1.0, 0.7, 0.2, -0.5, -1.0, -2.0, -3.0])
CASES = [(1.0, 0, 1.0), (0.7, 0, 1.0), (1.0, 5, 1.0), (2.0, 4, 1.0), (1.0, 0, 0.8),
         (1.5, 6, 0.7)]


def draws(temperature, top_k, top_p, kernel):
    """DRAWS tokens from LOGITS: one draw of each of DRAWS sequences (their generators
    differ by the sequence's index), by the kernel or by the reference."""
    seq = np.zeros((DRAWS, len(ref.SEQ_COLUMNS)), np.int32)
    seq[:, ref.LEFT] = 1
    logits = np.tile(LOGITS.astype(np.float32), (DRAWS, 1))
    kwargs = dict(vocab=LOGITS.size, temperature=temperature, top_k=top_k, top_p=top_p,
                  seed=7, stop_id=-1)
    out = launch(seq, logits, 2, **kwargs) if kernel else ref.sample_tokens(seq, logits, 2,
                                                                            **kwargs)
    return np.bincount(out[:, ref.TOKEN], minlength=LOGITS.size)


@pytest.mark.parametrize("kernel", [pytest.param(True, marks=pytest.mark.skipif(
    not ON_GPU, reason="20000 simulated blocks; in the simulator the kernel is held to the "
    "reference's draws, token for token, above")), False], ids=["kernel", "reference"])
@pytest.mark.parametrize("temperature, top_k, top_p", CASES)
def test_draws_follow_the_distribution(temperature, top_k, top_p, kernel):
    """The counts of many draws fit sampling_probabilities (chi-square below its 1e-4
    quantile), and exceed the bound for a top-k one off either way, a temperature a
    quarter off, or a top-p that keeps one token more or fewer: the test would see any
    of those mistakes."""
    counts = draws(temperature, top_k, top_p, kernel)
    p = ref.sampling_probabilities(LOGITS, temperature, top_k, top_p)
    limit = bound(int((p > 0).sum()) - 1) if (p > 0).sum() > 1 else 0.0
    assert chi_square(counts, p) <= limit
    kept = int((p > 0).sum())
    wrong = [(temperature * 1.25, top_k, top_p), (temperature / 1.25, top_k, top_p)]
    if top_k:
        wrong += [(temperature, top_k + 1, top_p), (temperature, top_k - 1, top_p)]
    for other in wrong:
        q = ref.sampling_probabilities(LOGITS, *other)
        if not np.allclose(q, p):       # (top-p may cut below either top-k)
            assert chi_square(counts, q) > limit, f"the counts fit {other} too"
    if top_p < 1:       # a cut one token later or earlier, at the same temperature
        for n in (kept - 1, kept + 1):
            if 1 <= n <= LOGITS.size:
                q = ref.sampling_probabilities(LOGITS, temperature, n, 1.0)
                assert chi_square(counts, q) > limit, f"the counts fit {n} tokens kept"


def test_temperature_0_is_greedy_and_top_k_1_too():
    logits = np.array([[0.5, 3.0, 3.0, -1.0]], np.float32)
    seq = np.array([[0, 0, 2, 0]], np.int32)
    assert launch(seq, logits, 4, temperature=0.0)[0, ref.TOKEN] == 1   # the first largest
    for seed in range(3):
        assert launch(seq, logits, 4, temperature=5.0, top_k=1, seed=seed)[0, ref.TOKEN] in (1, 2)


@pytest.mark.parametrize("kwargs, message", [
    (dict(vocab=0), r"vocab must lie in \[1, 4\]"),
    (dict(vocab=5), r"vocab must lie in \[1, 4\]"),
    (dict(temperature=-1.0), "temperature >= 0"),
    (dict(top_p=0.0), r"top_p in \(0, 1\]"),
    (dict(top_k=-2), "top_k >= 0"),
    (dict(block=48), "multiple of 32"),
])
def test_bad_arguments_are_refused(kwargs, message):
    seq = cuda.to_device(np.zeros((1, 4), np.int32))
    with pytest.raises(ValueError, match=message):
        sampling.sample_tokens(seq, cuda.to_device(np.ones((1, 4), np.float32)), 4, **kwargs)


def test_a_bad_state_is_refused():
    with pytest.raises(ValueError, match="seq"):
        sampling.sample_tokens(cuda.to_device(np.zeros((2, 4), np.int32)),
                               cuda.to_device(np.ones((1, 4), np.float32)), 4)
    with pytest.raises(TypeError, match="logits"):
        sampling.sample_tokens(cuda.to_device(np.zeros((1, 4), np.int32)),
                               cuda.to_device(np.ones((1, 4), np.float64)), 4)
