"""The token + position embedding kernels against the float64 reference
(kernels/embedding.py), repeated tokens included."""
import numpy as np
import pytest
from helpers import REAL_SHAPES, TOL_F32_OP, assert_close, poisoned, randn
from hypothesis import given
from hypothesis import strategies as st
from numba import cuda

from microgpt import reference as ref
from microgpt.kernels import embedding

# (B, T, C, V): tiny in the simulator (V small, so tokens repeat), andrea-120m's on a GPU
SIM_SHAPES = st.tuples(st.integers(1, 2), st.integers(1, 6), st.integers(1, 9), st.integers(1, 5))
# On a GPU the simulator's own shapes are drawn too: small sizes and edges where an
# out-of-range index shows in the simulator (IndexError) but passes unseen on a GPU
# unless compute-sanitizer watches.
if REAL_SHAPES:
    # a real-shape example costs seconds of host-side data and float64 reference
    SHAPES = st.one_of(st.just((16, 1024, 768, 50304)),
                       st.tuples(st.integers(1, 16), st.integers(1, 1024), st.integers(1, 768),
                                 st.integers(1, 50304)), SIM_SHAPES)
    BLOCKS = st.sampled_from([32, 96, 256, 1024])
else:
    SHAPES = SIM_SHAPES
    BLOCKS = st.sampled_from([32, 48])
# sorted positions per thread of the backward's run sums: the default, and chunks small
# enough that a token's run crosses several of them at the simulator's sizes
CHUNKS = st.sampled_from([embedding.CHUNK, 1, 2, 3])
# batch rows per thread of the position sums: the default (the batch in one part at the
# simulator's sizes and andrea-120m's B 16), and parts of 1 or 2 rows, added by the second
# launch
PART_ROWS = st.sampled_from([embedding.PART_ROWS, 1, 2])
SEEDS = st.integers(0, 2**32 - 1)


def draw_tokens(rng, B, T, V):
    """Token ids (B, T) int32 in which the last one repeats the first (when B*T > 1)."""
    idx = rng.integers(0, V, (B, T)).astype(np.int32)
    idx.reshape(-1)[-1] = idx.reshape(-1)[0]
    return idx


def check_forward(shape, extra_context, block, seed):
    """block None: the launcher's default."""
    B, T, C, V = shape
    rng = np.random.default_rng(seed)
    idx = draw_tokens(rng, B, T, V)
    wte, wpe = randn(rng, V, C), randn(rng, T + extra_context, C)
    out = cuda.to_device(poisoned((B, T, C)))
    embedding.encoder_forward(out, cuda.to_device(idx), cuda.to_device(wte),
                              cuda.to_device(wpe), **block_option(block))
    expected = ref.encoder_forward(idx, wte.astype(np.float64), wpe.astype(np.float64))
    assert_close(out.copy_to_host(), expected, TOL_F32_OP, "encoder forward")


def check_backward(shape, extra_context, block, seed, chunk=embedding.CHUNK,
                   deterministic=True, part_rows=embedding.PART_ROWS):
    """-> the (dwte, dwpe) the launch wrote, checked."""
    B, T, C, V = shape
    context = T + extra_context
    rng = np.random.default_rng(seed)
    idx = draw_tokens(rng, B, T, V)
    dout = randn(rng, B, T, C)
    dwte_start, dwpe_start = randn(rng, V, C), randn(rng, context, C)
    dwte, dwpe = cuda.to_device(dwte_start), cuda.to_device(dwpe_start)
    embedding.encoder_backward(dwte, dwpe, cuda.to_device(dout), cuda.to_device(idx),
                               runs_of(idx), deterministic=deterministic, chunk=chunk,
                               part_rows=part_rows, **block_option(block))
    dwte_ref, dwpe_ref = ref.encoder_backward(dout.astype(np.float64), idx, V, context)
    assert_close(dwte.copy_to_host(), dwte_start + dwte_ref, TOL_F32_OP, "dwte")
    assert_close(dwpe.copy_to_host(), dwpe_start + dwpe_ref, TOL_F32_OP, "dwpe")
    return dwte.copy_to_host(), dwpe.copy_to_host()


def runs_of(idx):
    """The host's sort of idx (token_runs) on the device, as the model copies it in."""
    return cuda.to_device(embedding.token_runs(idx))


def block_option(block):
    return {} if block is None else {"block": block}


@given(shape=SHAPES, extra_context=st.integers(0, 3), block=BLOCKS, seed=SEEDS)
def test_encoder_forward(shape, extra_context, block, seed):
    check_forward(shape, extra_context, block, seed)


@pytest.mark.parametrize("C", [8, 6])
def test_encoder_forward_in_groups_or_element_by_element(C):
    """A thread per 4 columns where C divides into them (the model's), else per element;
    2 positions of 8 columns are 4 groups across a 32-thread block's threads."""
    check_forward((1, 2, C, 3), 1, 32, seed=C)


@given(shape=SHAPES, extra_context=st.integers(0, 3), block=BLOCKS, chunk=CHUNKS,
       part_rows=PART_ROWS, seed=SEEDS)
def test_encoder_backward_accumulates(shape, extra_context, block, chunk, part_rows, seed):
    """The sorted, deterministic backward."""
    check_backward(shape, extra_context, block, seed, chunk, part_rows=part_rows)


@pytest.mark.parametrize("C", [8, 6])
def test_encoder_backward_in_groups_or_element_by_element(C):
    """The deterministic backward's threads take 4 columns where C divides into them (the
    model's), else one: 2 x 5 positions of tokens from 2, in chunks of 3 (runs begun,
    ended and going on in one), the batch in parts of one row."""
    check_backward((2, 5, C, 2), 1, 32, seed=C, chunk=3, part_rows=1)


@given(shape=SHAPES, extra_context=st.integers(0, 3), block=BLOCKS, seed=SEEDS)
def test_the_default_backward_accumulates(shape, extra_context, block, seed):
    """The scatter by float atomics."""
    check_backward(shape, extra_context, block, seed, deterministic=False)


@given(seed=SEEDS)
def test_encoder_backward_gives_the_same_bits_whatever_the_block(seed):
    """Each element of dwte is one thread's sum in an order fixed by the data (no
    atomics): launches with other blocks, repeated, give the same bits. (Atomics added in
    the order the threads came, which a block size changes.) 48 positions, tokens from 3,
    so that runs cross chunks of 2, the batch in parts of one row; blocks of 32 and 48
    split the launches' threads (the position sums' and the chunks' in one) differently."""
    shape = (2, 24, 3, 3)
    first = check_backward(shape, 0, 32, seed, chunk=2, part_rows=1)
    for block in (48, 32):
        for got, want in zip(check_backward(shape, 0, block, seed, chunk=2, part_rows=1),
                             first):
            np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


def direct_runs(idx):
    """token_runs written out: the positions in (token, position) order, by a sort of
    pairs, and each one's run end, by walking the sorted tokens."""
    flat = [int(x) for x in np.asarray(idx).reshape(-1)]
    order = [p for _, p in sorted((token, p) for p, token in enumerate(flat))]
    ends = [0] * len(order)
    for r in range(len(order) - 1, -1, -1):
        last = r == len(order) - 1 or flat[order[r + 1]] != flat[order[r]]
        ends[r] = r + 1 if last else ends[r + 1]
    return np.array([order, ends], np.int32).reshape(2, *np.shape(idx))


@given(B=st.integers(0, 3), T=st.integers(0, 40), vocab=st.sampled_from([3, 50304, 2**20]),
       seed=SEEDS)
def test_token_runs_sort_by_token_then_position(B, T, vocab, seed):
    """The host's sort (token_runs) against direct_runs: vocabularies whose ids sort as 16
    bits, GPT-2's (near the 16-bit keys' limit), and one past it (int32 keys); tokens from
    few enough that runs repeat, the commonest a third of the positions."""
    rng = np.random.default_rng(seed)
    few = rng.integers(0, vocab, 4)
    idx = np.where(rng.random((B, T)) < 0.35, few[0], rng.choice(few, (B, T))).astype(np.int32)
    idx.reshape(-1)[:1] = vocab - 1
    np.testing.assert_array_equal(embedding.token_runs(idx), direct_runs(idx))


def test_the_deterministic_backward_sums_in_the_runs_order():
    """The sums follow the runs they are given, not the ids: given the runs of the batch
    with token 2 read as token 1, one run holds both tokens' positions (across chunks of
    2), and its sum lands in the row of the id at its first position, token 1's; token
    2's row is left 0."""
    B, T, C, V = 1, 6, 2, 3
    idx = np.array([[1, 2, 1, 2, 0, 1]], np.int32)
    dout = np.random.default_rng(3).standard_normal((B, T, C)).astype(np.float32)
    dwte = cuda.to_device(np.zeros((V, C), np.float32))
    dwpe = cuda.to_device(np.zeros((T, C), np.float32))
    merged = np.where(idx == 2, 1, idx)
    embedding.encoder_backward(dwte, dwpe, cuda.to_device(dout), cuda.to_device(idx),
                               runs_of(merged), deterministic=True, chunk=2)
    expected = ref.encoder_backward(dout.astype(np.float64), merged, V, T)[0]
    assert_close(dwte.copy_to_host(), expected, TOL_F32_OP, "dwte by the runs given")


@pytest.mark.parametrize("B, T, chunk, part_rows", [
    (2, 3, embedding.CHUNK, embedding.PART_ROWS), (2, 3, 2, 1), (2, 3, 4, 1),
    (2, 20, 1, embedding.PART_ROWS), (20, 2, 1, 1)])
def test_encoder_backward_adds_up_one_repeated_token(B, T, chunk, part_rows):
    """Every position holds the same token: its row of dwte receives the whole sum (with
    chunks of 2 or 4, one run through every chunk, the last one short at 4; in chunks of
    one, 40 chunks, the heads added in more than one load of CARRY; in 20 parts of one
    row, more than CARRY too)."""
    C, V = 4, 3
    dout = np.random.default_rng(0).standard_normal((B, T, C)).astype(np.float32)
    idx = np.full((B, T), 1, np.int32)
    dwte = cuda.to_device(np.zeros((V, C), np.float32))
    dwpe = cuda.to_device(np.zeros((T, C), np.float32))
    embedding.encoder_backward(dwte, dwpe, cuda.to_device(dout), cuda.to_device(idx),
                               runs_of(idx), deterministic=True, chunk=chunk,
                               part_rows=part_rows)
    expected = np.zeros((V, C))
    expected[1] = dout.sum(axis=(0, 1), dtype=np.float64)
    assert_close(dwte.copy_to_host(), expected, TOL_F32_OP, "dwte of one repeated token")
    assert_close(dwpe.copy_to_host(), dout.sum(axis=0, dtype=np.float64), TOL_F32_OP,
                 "dwpe of one repeated token")


def test_default_block():
    """block left out, as the model launches them, over more than one 256-thread block."""
    check_forward((2, 5, 30, 7), 1, None, seed=8)
    check_backward((2, 5, 30, 7), 0, None, seed=9)


@pytest.mark.parametrize("deterministic", [False, True])
@pytest.mark.parametrize("B,T", [(0, 4), (2, 0)])
def test_empty_batch_launches_nothing(B, T, deterministic, no_launches):
    """The empty-input rule (kernels/common.py): no tokens, no launch, and the accumulated
    dwte and dwpe keep their values (a sum over no tokens adds nothing)."""
    rng = np.random.default_rng(1)
    idx = cuda.to_device(np.zeros((B, T), np.int32))
    wte_start, wpe_start = randn(rng, 5, 3), randn(rng, 4, 3)
    wte, wpe = cuda.to_device(wte_start), cuda.to_device(wpe_start)
    out = cuda.to_device(np.ones((B, T, 3), np.float32))
    embedding.encoder_forward(out, idx, wte, wpe)
    embedding.encoder_backward(wte, wpe, out, idx, runs_of(np.zeros((B, T), np.int32)),
                               deterministic=deterministic)
    np.testing.assert_array_equal(wte.copy_to_host(), wte_start)
    np.testing.assert_array_equal(wpe.copy_to_host(), wpe_start)


def ones(*shape, dtype=np.float32):
    return cuda.to_device(np.ones(shape, dtype))


@pytest.mark.parametrize("backward", [False, True])
@pytest.mark.parametrize("changes,error,message", [
    (dict(idx=ones(8, dtype=np.int32)), ValueError, r"idx: expected shape \(B, T\)"),
    (dict(idx=ones(2, 4, dtype=np.int64)), TypeError, "idx: expected dtype int32"),
    (dict(wte=ones(15)), ValueError, r"wte: expected shape \(V, C\), got \(15,\)"),
    (dict(wte=ones(5, 3, 1)), ValueError, r"wte: expected shape \(V, C\)"),
    (dict(wte=ones(5, 3, dtype=np.float64)), TypeError, "wte: expected dtype float32"),
    (dict(wpe=ones(3, 3)), ValueError, r"wpe: expected shape \(context >= 4, 3\)"),
    (dict(wpe=ones(6, 2)), ValueError, r"wpe: expected shape \(context >= 4, 3\)"),
    (dict(wpe=ones(6, 4)), ValueError, r"wpe: expected shape \(context >= 4, 3\)"),
    (dict(wpe=ones(18)), ValueError, r"wpe: expected shape \(context >= 4, 3\)"),
    (dict(out=ones(2, 4, 2)), ValueError, r"out: expected shape \(2, 4, 3\)"),
    (dict(block=0), ValueError, "block size"),
    (dict(block=1025), ValueError, "block size"),
])
def test_launchers_reject_bad_arguments(backward, changes, error, message):
    """encoder_forward(out, idx, wte, wpe) and encoder_backward(dwte, dwpe, dout, idx) on
    good arguments for (B, T, C, V, context) = (2, 4, 3, 5, 6) but for changes; the
    backward's names are dwte, dwpe and dout."""
    args = dict(out=ones(2, 4, 3), idx=ones(2, 4, dtype=np.int32), wte=ones(5, 3),
                wpe=ones(6, 3))
    args.update(changes)
    block = args.pop("block", embedding.BLOCK)
    if backward:
        message = message.replace("out", "dout").replace("wte", "dwte").replace("wpe", "dwpe")
        with pytest.raises(error, match=message):
            embedding.encoder_backward(args["wte"], args["wpe"], args["out"], args["idx"],
                                       block=block)
    else:
        with pytest.raises(error, match=message):
            embedding.encoder_forward(*args.values(), block=block)


@pytest.mark.parametrize("name", ["chunk", "part_rows"])
def test_encoder_backward_rejects_a_chunk_or_part_below_one(name):
    with pytest.raises(ValueError, match=f"{name} must be at least 1, got 0"):
        embedding.encoder_backward(ones(5, 3), ones(6, 3), ones(2, 4, 3),
                                   ones(2, 4, dtype=np.int32), **{name: 0})


@pytest.mark.parametrize("runs,error,message", [
    (None, ValueError, "the deterministic backward sums in the batch's sorted order"),
    (ones(2, 8, dtype=np.int32), ValueError, r"runs: expected shape \(2, 2, 4\)"),
    (ones(2, 2, 4, dtype=np.int64), TypeError, "runs: expected dtype int32"),
])
def test_the_deterministic_backward_rejects_bad_runs(runs, error, message):
    with pytest.raises(error, match=message):
        embedding.encoder_backward(ones(5, 3), ones(6, 3), ones(2, 4, 3),
                                   ones(2, 4, dtype=np.int32), runs, deterministic=True)


class RecordedKernel:
    """A kernel whose launches are recorded, not run: kernel[config](*args)."""

    def __init__(self, name, launched):
        self.name, self.launched = name, launched

    def __getitem__(self, config):
        return lambda *args: self.launched.append(self.name)


SORTED_BACKWARD = ["_sums_kernel", "_carries_kernel"]     # (kernels made by these)


@pytest.mark.parametrize("deterministic, first", [
    (False, ["_encoder_backward_atomic_kernel"]),
    (True, SORTED_BACKWARD)])
def test_a_deterministic_backend_sorts(deterministic, first, monkeypatch):
    """The backend hands its deterministic flag to the backward: the sums in the sorted
    order on a deterministic backend, the float atomics' scatter otherwise."""
    from microgpt.cuda_backend import CudaBackend
    launched = []
    monkeypatch.setattr(embedding, "_encoder_backward_atomic_kernel",
                        RecordedKernel("_encoder_backward_atomic_kernel", launched))
    for name in SORTED_BACKWARD:
        monkeypatch.setattr(embedding, name,
                            lambda *compiled, name=name: RecordedKernel(name, launched))
    B, T, C, V = 1, 2, 3, 4
    arrays = (ones(V, C), ones(T, C), ones(B, T, C), ones(B, T, dtype=np.int32),
              runs_of(np.ones((B, T), np.int32)))
    CudaBackend(deterministic=deterministic).encoder_backward(*arrays)
    assert launched == first
