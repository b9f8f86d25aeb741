"""The fused softmax cross-entropy kernels against the float64 reference
(kernels/crossentropy.py), the in-place backward and the forward + backward included.

Tolerances: float32 results TOL_F32_OP. bf16 logits are inputs: the reference gets the
same bf16-rounded values, so the losses keep TOL_F32_OP; a bf16 dlogits is the float32
gradient rounded, TOL_BF16_OUT (helpers). The unfused backward is fed the kernel's float32
lse (its rounding is the forward's error, |lse| u relative in every p); the forward +
backward keeps the logsumexp as row max + log of the rest and meets the float64 reference
of the logits alone, at any spread.
"""
import numpy as np
import pytest
from helpers import (BF16, REAL_SHAPES, TOL_F32_OP, assert_close, assert_output_close, bf16,
                     poisoned, randn, to_device_off_group)
from hypothesis import given
from hypothesis import strategies as st
from numba import cuda

from microgpt import reference as ref
from microgpt.kernels import crossentropy
from microgpt.kernels.precision import GROUP, group_width

# (N, V): tiny in the simulator (V above the block size too), GPT-2's vocabulary on a GPU
SIM_SHAPES = st.tuples(st.integers(1, 4), st.integers(1, 64))
# On a GPU the simulator's own shapes are drawn too: small sizes and edges where an
# out-of-range index shows in the simulator (IndexError) but passes unseen on a GPU
# unless compute-sanitizer watches.
if REAL_SHAPES:
    # a real-shape example costs seconds of host-side data and float64 reference
    SHAPES = st.one_of(st.just((1024, 50304)),
                       st.tuples(st.integers(1, 1024), st.integers(1, 50304)), SIM_SHAPES)
    BLOCKS = st.sampled_from([32, 128, 512, 1024])
else:
    SHAPES = SIM_SHAPES
    BLOCKS = st.just(32)
SEEDS = st.integers(0, 2**32 - 1)
# flat to peaked softmax; large logits test that the row max is taken out before exp
SCALES = st.sampled_from([0.5, 3.0, 30.0])
# logits rounded to integers tie often, the row max included, within and across threads
TIES = st.booleans()
# Rows of 40 to 48 columns per thread of a 32-thread block (2.5 to 3 chunks of 4 groups
# of 4, or 40 to 48 single columns), with logits of std 60: a thread's running max then
# meets values more than 88 below and above it, where exp of the wrong difference
# overflows float32. On a GPU, the model's rows.
WIDE_ROWS = SHAPES if REAL_SHAPES else st.tuples(st.integers(1, 2), st.integers(40 * 32, 48 * 32))
WIDE_SCALE = 60.0
DTYPES = st.sampled_from([np.float32, BF16])


def draw_case(seed, N, V, scale, ties, dtype=np.float32):
    """-> (logits for the device, the same values in float64, targets int32)."""
    rng = np.random.default_rng(seed)
    logits = randn(rng, N, V, scale=scale) + randn(rng, N, 1, scale=scale)
    if ties:
        logits = np.round(logits)
    device, exact = bf16(logits) if dtype == BF16 else (logits, logits.astype(np.float64))
    return device, exact, rng.integers(0, V, N).astype(np.int32)


def check_forward(shape, block, scale, ties, seed, dtype=np.float32):
    N, V = shape
    logits, exact, targets = draw_case(seed, N, V, scale, ties, dtype)
    losses, lse = cuda.to_device(poisoned(N)), cuda.to_device(poisoned(N))
    crossentropy.crossentropy_forward(losses, lse, cuda.to_device(logits),
                                      cuda.to_device(targets), block=block)
    losses_ref, lse_ref = ref.crossentropy_forward(exact, targets)
    assert_close(lse.copy_to_host(), lse_ref, TOL_F32_OP, "logsumexp")
    assert_close(losses.copy_to_host(), losses_ref, TOL_F32_OP, "losses")


def check_backward(shape, block, scale, ties, in_place, seed, dtype=np.float32):
    """dtype: of logits and dlogits alike (in place they are one array)."""
    N, V = shape
    logits, exact, targets = draw_case(seed, N, V, scale, ties, dtype)
    # the reference sees the very lse the kernel gets: the forward's, rounded to float32
    lse = ref.crossentropy_forward(exact, targets)[1].astype(np.float32)
    d_logits = cuda.to_device(logits)
    dlogits = d_logits if in_place else cuda.to_device(poisoned((N, V), dtype))
    crossentropy.crossentropy_backward(dlogits, d_logits, cuda.to_device(lse),
                                       cuda.to_device(targets), 1.0 / N, block=block)
    expected = ref.crossentropy_backward(1.0 / N, exact, lse.astype(np.float64), targets)
    assert_output_close(dlogits, expected, f"dlogits, in place {in_place}, {np.dtype(dtype)}")


def check_forward_backward(shape, block, scale, ties, seed, dtype=np.float32,
                           place=cuda.to_device, stage=None):
    """place: how the logits go to the device; stage: the launcher's choice of kernel."""
    N, V = shape
    logits, exact, targets = draw_case(seed, N, V, scale, ties, dtype)
    losses, d_logits = cuda.to_device(poisoned(N)), place(logits)
    crossentropy.crossentropy_forward_backward(losses, d_logits, cuda.to_device(targets),
                                               1.0 / N, block=block, stage=stage)
    losses_ref, dlogits_ref = ref.crossentropy_forward_backward(exact, targets, 1.0 / N)
    assert_close(losses.copy_to_host(), losses_ref, TOL_F32_OP, "fused losses")
    assert_output_close(d_logits, dlogits_ref, f"fused dlogits, {np.dtype(dtype)}")


@given(shape=SHAPES, block=BLOCKS, scale=SCALES, ties=TIES, dtype=DTYPES, seed=SEEDS)
def test_crossentropy_forward(shape, block, scale, ties, dtype, seed):
    check_forward(shape, block, scale, ties, seed, dtype)


@given(shape=SHAPES, block=BLOCKS, scale=SCALES, ties=TIES, in_place=st.booleans(),
       dtype=DTYPES, seed=SEEDS)
def test_crossentropy_backward(shape, block, scale, ties, in_place, dtype, seed):
    check_backward(shape, block, scale, ties, in_place, seed, dtype)


@given(shape=SHAPES, block=BLOCKS, scale=SCALES, ties=TIES, dtype=DTYPES,
       stage=st.sampled_from([None, False]), seed=SEEDS)
def test_crossentropy_forward_backward(shape, block, scale, ties, dtype, stage, seed):
    """stage None: the row in shared memory where it can be (V a multiple of 8 for bf16,
    of 4 for float32: the model's), else, as with False, the two passes over the row."""
    check_forward_backward(shape, block, scale, ties, seed, dtype, stage=stage)


# (N, 16-byte chunks of a row): up to 2 chunks a thread of a 32-thread block, or none
STAGED_SHAPES = SHAPES if REAL_SHAPES else st.tuples(st.integers(1, 3), st.integers(1, 64))


@given(shape=STAGED_SHAPES, block=BLOCKS, scale=SCALES, ties=TIES, dtype=DTYPES, seed=SEEDS)
def test_staged_forward_backward(shape, block, scale, ties, dtype, seed):
    """The row staged in shared memory by 16-byte chunks (8 bf16 or 4 float32 columns),
    whatever the target's place in its chunk; on a GPU the model's rows (V 50304 is
    101 KB of bf16, 201 KB of float32: the driver's opt-in beyond 48 KiB)."""
    N, n = shape
    V = n if REAL_SHAPES else n * 16 // np.dtype(dtype).itemsize
    V -= V % (16 // np.dtype(dtype).itemsize)
    check_forward_backward((N, max(V, 16 // np.dtype(dtype).itemsize)), block, scale, ties,
                           seed, dtype, stage=True)


def test_staged_only_where_the_rows_allow():
    """A view of a padded vocabulary, a row that ends mid-chunk or one wider than shared
    memory is read twice instead, and asking to stage it is an error."""
    wide = cuda.to_device(np.ones((2, 48), BF16))
    assert crossentropy.can_stage(wide)
    assert not crossentropy.can_stage(wide[:, :40])
    assert not crossentropy.can_stage(cuda.to_device(np.ones((2, 44), BF16)))
    assert crossentropy.can_stage(cuda.to_device(np.ones((1, 44), np.float32)))
    assert not crossentropy.can_stage(cuda.device_array(
        (1, crossentropy.STAGED_BYTES // 4 + 4), np.float32))
    targets, losses = cuda.to_device(np.zeros(2, np.int32)), cuda.to_device(poisoned(2))
    with pytest.raises(ValueError, match="cannot be staged"):
        crossentropy.crossentropy_forward_backward(losses, wide[:, :44], targets, 0.5,
                                                   stage=True)


@given(shape=SHAPES, padding=st.integers(1, 9), block=BLOCKS, dtype=DTYPES, seed=SEEDS)
def test_the_tokens_of_a_padded_vocabulary(shape, padding, block, dtype, seed):
    """A padded vocabulary (GPT-2's 50,257 tokens in 50,304 columns): the forward and the
    forward + backward on the view of the tokens' columns, as the model passes it; the
    padding's columns take no part and are left as they were (drawn values here)."""
    N, V = shape
    logits, exact, targets = draw_case(seed, N, V + padding, 3.0, False, dtype)
    exact = exact[:, :V]
    targets = targets % V
    wide = cuda.to_device(logits)
    losses, lse = cuda.to_device(poisoned(N)), cuda.to_device(poisoned(N))
    crossentropy.crossentropy_forward(losses, lse, wide[:, :V], cuda.to_device(targets),
                                      block=block)
    losses_ref, lse_ref = ref.crossentropy_forward(exact, targets)
    assert_close(lse.copy_to_host(), lse_ref, TOL_F32_OP, "logsumexp of the tokens")
    assert_close(losses.copy_to_host(), losses_ref, TOL_F32_OP, "losses of the tokens")
    losses = cuda.to_device(poisoned(N))
    crossentropy.crossentropy_forward_backward(losses, wide[:, :V], cuda.to_device(targets),
                                               1.0 / N, block=block)
    losses_ref, dlogits_ref = ref.crossentropy_forward_backward(exact, targets, 1.0 / N)
    assert_close(losses.copy_to_host(), losses_ref, TOL_F32_OP, "fused losses of the tokens")
    got = wide.copy_to_host()
    np.testing.assert_array_equal(got[:, V:], logits[:, V:])      # the padding untouched
    assert_output_close(cuda.to_device(np.ascontiguousarray(got[:, :V])), dlogits_ref,
                        f"fused dlogits of the tokens, {np.dtype(dtype)}")


@given(shape=WIDE_ROWS, block=BLOCKS, in_place=st.booleans(), seed=SEEDS)
def test_crossentropy_of_widely_spread_logits(shape, block, in_place, seed):
    check_forward(shape, block, WIDE_SCALE, False, seed)
    check_backward(shape, block, WIDE_SCALE, False, in_place, seed)
    check_forward_backward(shape, block, WIDE_SCALE, False, seed)


def test_default_block_at_its_cap():
    """block=None as the model launches it, on rows wider than the default 512 threads."""
    check_forward((2, 600), None, 3.0, False, seed=5)
    check_backward((2, 600), None, 3.0, False, True, seed=6)
    check_forward_backward((2, 600), None, 3.0, False, seed=7, dtype=BF16)


@pytest.mark.parametrize("V,off_group,width", [(600, False, GROUP), (602, False, 1),
                                               (600, True, 1)])
def test_groups_or_element_by_element(V, off_group, width):
    """Rows read in groups of 4 where they split into them (the model's), and one element
    at a time where V or the logits' start does not; 600 columns are two chunks of a
    thread of a 32-thread block in groups."""
    place = to_device_off_group if off_group else cuda.to_device
    assert group_width(V, place(np.ones((2, V), BF16))) == width
    check_forward_backward((2, V), 32, 3.0, False, seed=V, dtype=BF16, place=place)


def test_no_rows_launch_nothing(no_launches):
    """The empty-input rule (kernels/common.py): N = 0 rows is no launch and no error."""
    logits, rows = cuda.to_device(np.ones((0, 5), np.float32)), cuda.to_device(poisoned(0))
    targets = cuda.to_device(np.zeros(0, np.int32))
    crossentropy.crossentropy_forward(rows, rows, logits, targets)
    crossentropy.crossentropy_backward(logits, logits, rows, targets, 1.0)
    crossentropy.crossentropy_forward_backward(rows, logits, targets, 1.0)


def test_confidently_right_tokens_keep_relative_accuracy():
    """Target = argmax by a wide margin: the loss is about exp(-gap) and the gradient as
    small, both far below float32's resolution of 1 + tiny. The row max sits near 0 so
    that the float32 lse still carries the tiny part the backward needs."""
    logits = np.array([[-20.0, 0.0, -23.0], [-23.0, -39.0, 0.5]], np.float32)
    targets = np.array([1, 2], np.int32)
    losses, lse = cuda.to_device(poisoned(2)), cuda.to_device(poisoned(2))
    d_logits, d_targets = cuda.to_device(logits), cuda.to_device(targets)
    crossentropy.crossentropy_forward(losses, lse, d_logits, d_targets, block=32)
    losses_ref, _ = ref.crossentropy_forward(logits.astype(np.float64), targets)
    assert_close(losses.copy_to_host(), losses_ref, TOL_F32_OP, "tiny losses")

    lse32 = lse.copy_to_host()
    crossentropy.crossentropy_backward(d_logits, d_logits, lse, d_targets, 0.5, block=32)
    expected = ref.crossentropy_backward(0.5, logits.astype(np.float64), lse32.astype(np.float64),
                                         targets)
    assert_close(d_logits.copy_to_host(), expected, TOL_F32_OP, "tiny dlogits")


def test_fused_keeps_a_tiny_loss_at_a_large_max():
    """The target is the max of 300 by a gap of 10: loss and p - 1 are ~5e-5, below the
    resolution of a float32 lse of 300 (3e-5), so a backward fed a saved lse loses them.
    The forward + backward keeps the logsumexp as max + log1p(rest) and both keep their
    relative accuracy (the float64 reference holds them to ~1e-9)."""
    logits = np.array([[290.0, 300.0, 287.5], [-1.0, 2.0, 0.5]], np.float32)
    targets = np.array([1, 0], np.int32)
    check_rows = ref.crossentropy_forward_backward(logits.astype(np.float64), targets, 0.5)
    losses, d_logits = cuda.to_device(poisoned(2)), cuda.to_device(logits)
    crossentropy.crossentropy_forward_backward(losses, d_logits, cuda.to_device(targets), 0.5,
                                               block=32)
    assert_close(losses.copy_to_host()[:1], check_rows[0][:1], TOL_F32_OP, "tiny loss")
    assert_close(d_logits.copy_to_host()[:1], check_rows[1][:1], TOL_F32_OP, "tiny dlogits")
    assert_close(d_logits.copy_to_host(), check_rows[1], TOL_F32_OP, "dlogits")


def test_row_max_tied_across_threads():
    """The max appears in columns 0, 32 (thread 0 twice) and 33 (thread 1) of a 32-thread
    block: its exp(0) = 1 must be counted three times, no more, no less."""
    V = 40
    logits = np.random.default_rng(1).uniform(-4.0, 0.0, (1, V)).astype(np.float32)
    logits[0, [0, 32, 33]] = 2.0
    targets = np.array([5], np.int32)
    losses, lse = cuda.to_device(poisoned(1)), cuda.to_device(poisoned(1))
    crossentropy.crossentropy_forward(losses, lse, cuda.to_device(logits),
                                      cuda.to_device(targets), block=32)
    losses_ref, lse_ref = ref.crossentropy_forward(logits.astype(np.float64), targets)
    assert_close(lse.copy_to_host(), lse_ref, TOL_F32_OP, "lse with a tied max")
    assert_close(losses.copy_to_host(), losses_ref, TOL_F32_OP, "loss with a tied max")


def ones(*shape, dtype=np.float32):
    return cuda.to_device(np.ones(shape, dtype))


def launch(kind, losses=(3,), lse=(3,), logits=(3, 7), targets=(3,),
           targets_dtype=np.int32, dlogits=(3, 7), block=None, dtype=np.float32):
    """crossentropy_forward, _backward or _forward_backward (kind) on arrays of these
    shapes, logits of this dtype."""
    d_logits, d_lse = ones(*logits, dtype=dtype), ones(*lse)
    d_targets = cuda.to_device(np.zeros(targets, targets_dtype))
    if kind == "backward":
        crossentropy.crossentropy_backward(ones(*dlogits), d_logits, d_lse, d_targets, 1 / 3,
                                           block=block)
    elif kind == "fused":
        crossentropy.crossentropy_forward_backward(ones(*losses), d_logits, d_targets, 1 / 3,
                                                   block=block)
    else:
        crossentropy.crossentropy_forward(ones(*losses), d_lse, d_logits, d_targets, block=block)


@pytest.mark.parametrize("kind", ["forward", "backward", "fused"])
@pytest.mark.parametrize("changes,error,message", [
    (dict(logits=(3, 7, 1)), ValueError, r"logits: expected shape \(N, V\)"),
    (dict(logits=(3, 0), dlogits=(3, 0)), ValueError, "V must be at least 1, got 0"),
    (dict(targets=(2,)), ValueError, r"targets: expected shape \(3,\)"),
    (dict(targets_dtype=np.int64), TypeError, "targets: expected dtype int32"),
    (dict(dtype=np.float16), TypeError, "logits: expected dtype float32 or bf16"),
    (dict(block=0), ValueError, "block size"),
    (dict(block=1056), ValueError, "block size"),
])
def test_launchers_reject_bad_arguments(kind, changes, error, message):
    with pytest.raises(error, match=message):
        launch(kind, **changes)


def test_launchers_reject_their_own_bad_arguments():
    with pytest.raises(ValueError, match=r"lse: expected shape \(3,\)"):
        launch("forward", lse=(4,))
    with pytest.raises(ValueError, match=r"lse: expected shape \(3,\)"):
        launch("backward", lse=(2,))
    for kind in ("forward", "fused"):
        with pytest.raises(ValueError, match=r"losses: expected shape \(3,\)"):
            launch(kind, losses=(4,))
        with pytest.raises(ValueError, match="block size must be a multiple of 32"):
            launch(kind, block=48)          # block_max and block_sum need whole warps
    with pytest.raises(ValueError, match=r"dlogits: expected shape \(3, 7\)"):
        launch("backward", dlogits=(3,))
    launch("backward", block=48)            # the backward has no block reduction
