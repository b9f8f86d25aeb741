"""The whole model on the cuda backend against the float64 NumPy reference: the loss, every
gradient, the AdamW moments and the parameters, over a few AdamW steps.

In the simulator (CI) the tiny config runs; on a GPU (MICROGPT_TEST_DEVICE=gpu) the andrea-12m
and andrea-120m geometries do. Every activation buffer is poisoned with NaN before the first
pass, so a kernel that leaves an element unwritten fails the comparison.
"""
import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest
from helpers import ON_GPU, REAL_SHAPES, TOL_F32_MODEL, assert_close, rel_error

from microgpt import GPT, activations, get_config
from microgpt.activations import Buffers, activation_specs
from microgpt.cuda_backend import CudaBackend
from microgpt.errors import BackendError
from microgpt.kernels.gemm import turns
from microgpt.ops import LOG_COLUMNS
from microgpt.optim import AdamW, AdamWConfig, lr_at
from microgpt.step import Step

if REAL_SHAPES:
    CASES = [("andrea-12m", {}, 4, 256), ("andrea-120m", {}, 2, 256)]
else:
    CASES = [("microgpt", dict(vocab_size=24), 2, 8),
             ("microgpt", dict(vocab_size=24, n_layer=2, d_model=24, n_head=3), 1, 5)]
# A GPU's third step replays the graph that its second captured. The simulator captures
# nothing, so its third step would repeat its second's path: two cover the first update and
# one from moments that are not zero, at two thirds of the minutes.
STEPS = 3 if ON_GPU else 2


def poison(backend, buffers):
    """Every buffer of a table with all its bits set: NaN in float32 and bf16 alike (the
    arena's parts are either), token ids -1."""
    for _, buf in buffers.arrays():
        nbytes = buf.size * np.dtype(buf.dtype).itemsize
        backend.copy(buf, np.frombuffer(b"\xff" * nbytes, buf.dtype).reshape(buf.shape))


def poison_activations(model, B, T):
    """Allocate the model's own (B, T) buffers and poison them."""
    model._acts = Buffers(model.backend, activation_specs(model.config, B, T, model.precision))
    poison(model.backend, model._acts)


def assert_all_close(got, want, what):
    """Every tensor within the whole-model tolerance; the message lists the worst three."""
    errors = {name: rel_error(got[name], want[name]) for name in want}
    worst = sorted(errors, key=errors.get, reverse=True)[:3]
    assert errors[worst[0]] < TOL_F32_MODEL, f"{what}: " + ", ".join(
        f"{name} {errors[name]:.2e}" for name in worst)


def assert_all_equal(got, want):
    assert got.keys() == want.keys()
    for name in want:
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)


# in the simulator the second case is test_captured_steps_match_reference's below (the
# same kernels, shape and steps, every comparison of this test among its own)
@pytest.mark.parametrize("name,overrides,B,T", CASES if REAL_SHAPES else CASES[:1])
def test_cuda_steps_match_reference(name, overrides, B, T):
    """STEPS AdamW steps (three on a GPU), each checked from a common state: the reference
    takes the device model's parameters and moments, both compute the loss and gradients
    (compared), then the reference optimizer steps on the device's gradients, so the moments
    and parameters compare the AdamW arithmetic alone. AdamW's update is m/sqrt(v): on its
    first step the sign of g, so an element whose gradient is within float32 round-off of
    zero moves by +-lr either way; comparing free-running float32 and float64 trajectories
    would measure that conditioning, not the kernels."""
    cfg = get_config(name, **overrides)
    rng = np.random.default_rng(abs(hash((name, B, T))) % 2**32)
    ref = GPT(cfg, backend="numpy", seed=3, dtype=np.float64)
    dev = GPT(cfg, backend="cuda", seed=3)
    poison_activations(dev, B, T)

    opt_cfg = AdamWConfig(lr=1e-3, warmup_steps=1, total_steps=3)
    opt_ref, opt_dev = AdamW(ref, opt_cfg), AdamW(dev, opt_cfg)
    for step in range(STEPS):
        ref.load_state_dict(dev.state_dict())
        opt_ref.load_state_dict(*opt_dev.state_dict())
        idx = rng.integers(0, cfg.vocab_size, (B, T))
        targets = rng.integers(0, cfg.vocab_size, (B, T))
        loss_ref, grads_ref = ref.loss_and_grads(idx, targets)
        loss_dev, grads_dev = dev.loss_and_grads(idx, targets)
        assert abs(loss_dev - loss_ref) / abs(loss_ref) < TOL_F32_MODEL, (step, loss_dev, loss_ref)
        assert_all_close(grads_dev, grads_ref, f"step {step} gradient")

        ref.grads_flat[...] = dev.backend.to_host(dev.grads_flat)
        lr = lr_at(step, opt_cfg)
        norm_ref, norm_dev = opt_ref.step(lr), opt_dev.step(lr)
        assert abs(norm_dev - norm_ref) / norm_ref < TOL_F32_MODEL
        (moments_ref, _), (moments_dev, _) = opt_ref.state_dict(), opt_dev.state_dict()
        assert_all_close(moments_dev, moments_ref, f"step {step} AdamW moment")
        assert_all_close(dev.state_dict(), ref.state_dict(), f"after step {step}, parameter")


def test_cuda_forward_and_state_round_trip():
    cfg = get_config("microgpt", vocab_size=24)
    ref, dev = GPT(cfg, backend="numpy", seed=1), GPT(cfg, backend="cuda", seed=7)
    dev.load_state_dict(ref.state_dict())
    for pname, value in ref.state_dict().items():
        np.testing.assert_array_equal(dev.state_dict()[pname], value)
    idx = np.random.default_rng(0).integers(0, cfg.vocab_size, (2, 6))
    assert_close(dev.forward(idx), ref.forward(idx), 1e-5, "logits")


def test_checkpoint_resumes_on_the_other_backend(tmp_path):
    """A checkpoint written by a numpy run continues on cuda (and back): after one more step
    each, both agree with the run that never stopped."""
    from microgpt.checkpoint import load_checkpoint, save_checkpoint
    from microgpt.tokenizer import TokenIds

    cfg = get_config("microgpt", vocab_size=24)
    opt_cfg = AdamWConfig(lr=3e-3, total_steps=2)
    rng = np.random.default_rng(5)
    batches = [rng.integers(0, cfg.vocab_size, (1, 7)) for _ in range(2)]
    runs = {}
    for first, second in (("numpy", "cuda"), ("cuda", "numpy"), ("numpy", "numpy")):
        model = GPT(cfg, backend=first, seed=2)
        opt = AdamW(model, opt_cfg)
        model.forward_backward(batches[0][:, :-1], batches[0][:, 1:])
        opt.step(lr_at(0, opt_cfg))
        path = save_checkpoint(tmp_path / f"{first}-{second}", model, opt.state_dict(),
                               TokenIds(cfg.vocab_size), {"step": 1})
        ckpt = load_checkpoint(path)
        resumed = GPT(ckpt.config, backend=second, seed=99)
        resumed.load_state_dict(ckpt.params)
        opt = AdamW(resumed, opt_cfg)
        opt.load_state_dict(ckpt.moments, ckpt.state["optimizer"])
        resumed.forward_backward(batches[1][:, :-1], batches[1][:, 1:])
        opt.step(lr_at(1, opt_cfg))
        runs[first, second] = resumed.state_dict()
    straight = runs["numpy", "numpy"]
    assert_all_close(runs["numpy", "cuda"], straight, "numpy -> cuda")
    assert_all_close(runs["cuda", "numpy"], straight, "cuda -> numpy")


class TakeTheGradient:
    """The reference step's gradient sync: where a data-parallel world would average the
    gradient (after the backward, before the update), it compares the reference's gradient
    with the device's, then replaces it with the device's."""

    def __init__(self, dev, ref):
        self.dev, self.ref, self.step = dev, ref, None

    def ready(self, lo, hi):
        pass

    def finish(self):
        host = self.dev.backend.to_host(self.dev.grads_flat)
        assert_all_close(self.dev.layout.views(host), self.ref.layout.views(self.ref.grads_flat),
                         f"step {self.step} gradient")
        self.ref.grads_flat[...] = host


# GPT-2's shape (biases in the linear layers, a vocabulary padded past its tokens), its
# steps accumulating micro-batches: on a GPU at andrea-120m's size, on the default and on
# a deterministic backend (each micro-batch's token_runs copied in with it)
GPT2_LIKE = dict(bias=True, n_tokens=50257) if REAL_SHAPES else dict(bias=True, n_tokens=21)
STEP_CASES = [(*case, 1, False) for case in CASES] + [
    (*CASES[-1][:1], {**CASES[-1][1], **GPT2_LIKE}, *CASES[-1][2:], 2, deterministic)
    for deterministic in (False, True)]


# in the simulator every step runs eagerly: small cases keep the Step path covered there,
# the micro-batches' on the deterministic backend alone (the default's differs in the
# embedding's and split-K's adds, which their kernels' tests cover, at a minute a case)
@pytest.mark.parametrize("name,overrides,B,T,accum,deterministic",
                         STEP_CASES if REAL_SHAPES else [STEP_CASES[1], STEP_CASES[-1]])
def test_captured_steps_match_reference(name, overrides, B, T, accum, deterministic):
    """STEPS training steps (three on a GPU) through microgpt.step.Step on the cuda backend:
    on a GPU the first runs eagerly, the second is captured into a CUDA graph and the third
    replays it (in the simulator all are eager). Beside it the float64 reference takes each
    step from the same state, as in the test above: the gradient (still in the buffer after
    the update), then AdamW on the device's gradient: the logged loss, norm and lr, the
    moments and the parameters, all within the whole-model tolerance. With accum, each step
    sums the gradients of that many micro-batches, the biases' too."""
    cfg = get_config(name, **overrides)
    rng = np.random.default_rng(abs(hash((name, B, T, "graph"))) % 2**32)
    opt_cfg = AdamWConfig(lr=1e-3, warmup_steps=1, total_steps=3)
    dev = GPT(cfg, backend=CudaBackend(deterministic=deterministic), seed=3)
    ref = GPT(cfg, backend="numpy", seed=3, dtype=np.float64)
    opt_dev, opt_ref = AdamW(dev, opt_cfg), AdamW(ref, opt_cfg)
    take = TakeTheGradient(dev, ref)
    step_dev = Step(dev, opt_dev, B, T, accum=accum)
    step_ref = Step(ref, opt_ref, B, T, accum=accum, sync=take)
    poison(dev.backend, step_dev.buffers)
    for i in range(STEPS):
        ref.load_state_dict(dev.state_dict())
        opt_ref.load_state_dict(*opt_dev.state_dict())
        tokens, targets = (rng.integers(0, cfg.tokens, (accum * B, T)) for _ in range(2))
        step_dev.run(tokens, targets)
        got = step_dev.metrics()
        take.step = i
        step_ref.run(tokens, targets)
        want = step_ref.metrics()
        for column in LOG_COLUMNS:
            assert_close(got[column], want[column], TOL_F32_MODEL, f"step {i} {column}")
        assert_close(got["lr"], [lr_at(i, opt_cfg)], 1e-6, f"step {i} lr")
        (moments_ref, _), (moments_dev, _) = opt_ref.state_dict(), opt_dev.state_dict()
        assert_all_close(moments_dev, moments_ref, f"step {i} AdamW moment")
        assert_all_close(dev.state_dict(), ref.state_dict(), f"after step {i}, parameter")
    assert bool(step_dev._captured) == dev.backend.graphs


# a graph still referenced when the interpreter exits, replayed twice on a counter
GRAPH_AT_EXIT = """
import numpy as np
from numba import cuda
from microgpt.cuda_backend import CudaBackend

ops = CudaBackend()

@cuda.jit
def count(x):
    x[cuda.grid(1)] += 1

x = cuda.to_device(np.zeros(32, np.float32))
count[1, 32, ops.stream](x)
graph = ops.capture(lambda: count[1, 32, ops.stream](x))
graph.replay()
graph.replay()
print(ops.to_host(x)[0])
"""


@pytest.mark.skipif(not ON_GPU, reason="CUDA graphs need a GPU (the simulator launches "
                    "eagerly, capturing nothing)")
def test_a_graph_alive_at_exit_is_destroyed_quietly():
    """The exit's clean-up destroys a graph that is still referenced, and prints nothing:
    Graph.__del__ imported the driver bindings there once, when imports no longer work,
    and Python printed the ImportError as an ignored exception."""
    run = subprocess.run([sys.executable, "-c", GRAPH_AT_EXIT], capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.split() == ["3.0"]
    assert "Exception ignored" not in run.stderr, run.stderr[-3000:]


# bf16: the tiny case in the simulator (the tensor-core twins cost ~1 s a launch there)
# (on a GPU GPT-2's biases too: their gradients' sums fused into the LayerNorm backward
# and the GELU's; the simulator's fp32 step above runs the same launchers)
BF16_CASES = ([("andrea-12m", {}, 4, 256), ("andrea-12m", dict(bias=True), 4, 256)]
              if REAL_SHAPES else
              [("microgpt", dict(vocab_size=16, n_layer=1, d_model=16, n_head=1, context=8),
                1, 5)])
# Every operand of a GEMM or of attention is rounded to bf16 (unit roundoff 2**-9 = 2e-3)
# where the reference keeps float64; a gradient's error gathers a few such roundings per
# layer it crosses (measured at 4.5e-3 on a 2-layer model), so 2e-2 is ~4x that and still
# ~50x below what a wrong tile, mask or rescale gives (errors of order 1). The loss, a mean
# over tokens of small logits, moved by 6e-6 there: 1e-3.
TOL_BF16_LOSS, TOL_BF16_GRAD = 1e-3, 2e-2


@pytest.mark.parametrize("name,overrides,B,T", BF16_CASES)
def test_bf16_step_matches_reference_on_rounded_weights(name, overrides, B, T):
    """One Step of GPT(..., precision="bf16"): the GEMMs on the tensor cores, flash
    attention, bf16 activations where a GEMM or attention reads them. The float64 reference
    takes the weights the GEMMs read (the matrices rounded to bf16): the loss and every
    gradient within the tolerances above. Then the update: the bf16 copy of the matrices
    the AdamW pass wrote is the new float32 matrices rounded, bit for bit."""
    cfg = get_config(name, **overrides)
    rng = np.random.default_rng(abs(hash((name, B, T, "bf16"))) % 2**32)
    dev = GPT(cfg, backend="cuda", seed=3, precision="bf16")
    ref = GPT(cfg, backend="numpy", seed=3, dtype=np.float64)
    ref.load_state_dict({n: v.astype(ml_dtypes.bfloat16).astype(np.float32) if v.ndim == 2
                         else v for n, v in dev.state_dict().items()})
    step = Step(dev, AdamW(dev, AdamWConfig(lr=1e-3)), B, T)
    poison(dev.backend, step.buffers)
    tokens, targets = (rng.integers(0, cfg.vocab_size, (B, T)) for _ in range(2))
    step.run(tokens, targets)
    loss_ref, grads_ref = ref.loss_and_grads(tokens, targets)
    loss = step.metrics()["loss"][0]
    assert abs(loss - loss_ref) / loss_ref < TOL_BF16_LOSS, (loss, loss_ref)
    grads = dev.layout.views(dev.backend.to_host(dev.grads_flat))
    errors = {n: rel_error(grads[n], grads_ref[n]) for n in grads_ref}
    worst = max(errors, key=errors.get)
    assert errors[worst] < TOL_BF16_GRAD, f"gradient {worst}: {errors[worst]:.2e}"
    n = dev.layout.n_decay
    matrices = dev.backend.to_host(dev.params_flat)[:n].astype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(dev.backend.to_host(dev.matrices_flat),
                                  matrices.view(np.uint16))


def test_checkpoint_resumes_in_the_other_precision(tmp_path):
    """Checkpoints hold the float32 master weights and moments whatever the precision: a
    bf16 run's loads into fp32 unchanged (the masters, not their bf16 copies), and an fp32
    run's loads into bf16 with the copy of the matrices the GEMMs read rounded from it, bit
    for bit."""
    from microgpt.checkpoint import load_checkpoint, save_checkpoint
    from microgpt.tokenizer import TokenIds

    name, overrides, _, _ = BF16_CASES[0]
    cfg = get_config(name, **overrides)
    opt_cfg = AdamWConfig(lr=3e-3, total_steps=2)
    rng = np.random.default_rng(11)
    saved = {}
    for precision in ("bf16", "fp32"):
        model = GPT(cfg, backend="cuda", seed=4, precision=precision)
        opt = AdamW(model, opt_cfg)
        # a gradient drawn rather than computed: the simulator's bf16 kernels are slow, and
        # what is under test is the state an update leaves (masters, moments, the bf16 copy)
        model.backend.copy(model.grads_flat, model.backend.to_device(
            rng.standard_normal(model.layout.size).astype(np.float32)))
        opt.step(lr_at(0, opt_cfg))
        path = save_checkpoint(tmp_path / precision, model, opt.state_dict(),
                               TokenIds(cfg.vocab_size), {"step": 1})
        saved[precision] = model.state_dict(), opt.state_dict()[0], load_checkpoint(path)

    params, moments, ckpt = saved["bf16"]
    resumed = GPT(ckpt.config, backend="cuda", seed=99, precision="fp32")
    resumed.load_state_dict(ckpt.params)
    opt = AdamW(resumed, opt_cfg)
    opt.load_state_dict(ckpt.moments, ckpt.state["optimizer"])
    assert_all_equal(resumed.state_dict(), params)
    assert_all_equal(opt.state_dict()[0], moments)
    w = params["h.0.mlp.w_fc"]
    assert not np.array_equal(w, w.astype(ml_dtypes.bfloat16).astype(np.float32)), \
        "the checkpoint holds bf16-rounded weights, not the float32 masters"

    params, moments, ckpt = saved["fp32"]
    resumed = GPT(ckpt.config, backend="cuda", seed=99, precision="bf16")
    resumed.load_state_dict(ckpt.params)
    assert_all_equal(resumed.state_dict(), params)
    n = resumed.layout.n_decay
    rounded = resumed.backend.to_host(resumed.params_flat)[:n].astype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(resumed.backend.to_host(resumed.matrices_flat),
                                  rounded.view(np.uint16))


def test_bf16_needs_the_cuda_backend():
    with pytest.raises(BackendError, match="precision bf16 runs on the cuda backend"):
        GPT(get_config("microgpt", vocab_size=16), backend="numpy", precision="bf16")
    with pytest.raises(ValueError, match="head_dim 256 is wider than flash attention's"):
        GPT(get_config("microgpt", vocab_size=16, d_model=256, n_head=1), backend="cuda",
            precision="bf16")
    with pytest.raises(ValueError, match="precision must be one of fp32, bf16, got 'fp16'"):
        GPT(get_config("microgpt", vocab_size=16), backend="cuda", precision="fp16")


# the head in chunks of rows (HEAD_ROWS that small), the last one shorter: on a GPU
# andrea-12m's 1024 rows in three chunks of 344 and GPT-2's padded vocabulary at
# andrea-120m's width in three of 176, two layers of it (twelve kept the float64
# reference past a GPU call's 140 s: the head's products are what is under test); in the
# simulator the tiny model's 14 rows in chunks of 8 (its bf16 passes are too slow for CI:
# ~2 minutes each)
CHUNKED_CASES = ([("fp32", ("andrea-12m", {}, 4, 256), 342),
                  ("bf16", ("andrea-12m", {}, 4, 256), 342),
                  ("bf16", ("andrea-120m", dict(bias=True, n_tokens=50257, n_layer=2), 2, 256),
                   171)]
                 if REAL_SHAPES else
                 [("fp32", ("microgpt", dict(vocab_size=24, n_layer=1), 2, 7), 5)])


@pytest.mark.parametrize("precision,case,chunk", CHUNKED_CASES)
def test_the_head_in_chunks_matches_the_reference(precision, case, chunk, monkeypatch):
    """Steps of a model whose head runs a chunk of rows at a time (each chunk's logits,
    the loss and dlogits in place, its rows of dln and its part of the head's dW) against
    the float64 reference (in the same chunks, which tests/test_model.py holds to one
    chunk of the whole batch): on a GPU eager, captured and replayed; the loss and every
    gradient within the whole-model tolerance (bf16: the bf16 step's, the reference on the
    rounded matrices), then the evaluation's loss and the logits of the public forward,
    which walk the chunks too. With the step's other memory saving, the LayerNorms' and
    GELU's outputs recomputed in the backward (recompute; the other tests take the
    default)."""
    name, overrides, B, T = case
    cfg = get_config(name, **overrides)
    monkeypatch.setattr(activations, "HEAD_ROWS", chunk)
    chunks = -(-B * T // activations.head_rows(B * T))
    assert chunks == 3 if ON_GPU else chunks == 2
    rng = np.random.default_rng(abs(hash((name, B, T, "chunks"))) % 2**32)
    dev = GPT(cfg, backend="cuda", seed=3, precision=precision, recompute="all")
    ref = GPT(cfg, backend="numpy", seed=3, dtype=np.float64)
    bf16 = precision == "bf16"
    tol_loss, tol_grad = (TOL_BF16_LOSS, TOL_BF16_GRAD) if bf16 else (TOL_F32_MODEL,) * 2
    step = Step(dev, AdamW(dev, AdamWConfig(lr=1e-3)), B, T)
    poison(dev.backend, step.buffers)
    for i in range(STEPS if ON_GPU else 1):     # (the simulator's second repeats its first)
        ref.load_state_dict({n: v.astype(ml_dtypes.bfloat16).astype(np.float32)
                             if bf16 and v.ndim == 2 else v
                             for n, v in dev.state_dict().items()})
        tokens, targets = (rng.integers(0, cfg.tokens, (B, T)) for _ in range(2))
        step.run(tokens, targets)
        loss = step.metrics()["loss"][0]
        loss_ref, grads_ref = ref.loss_and_grads(tokens, targets)
        assert abs(loss - loss_ref) / loss_ref < tol_loss, (i, loss, loss_ref)
        grads = dev.layout.views(dev.backend.to_host(dev.grads_flat))
        errors = {n: rel_error(grads[n], grads_ref[n]) for n in grads_ref}
        worst = max(errors, key=errors.get)
        assert errors[worst] < tol_grad, f"step {i} gradient {worst}: {errors[worst]:.2e}"
    ref.load_state_dict({n: v.astype(ml_dtypes.bfloat16).astype(np.float32)
                         if bf16 and v.ndim == 2 else v for n, v in dev.state_dict().items()})
    assert abs(step.evaluate(tokens, targets) - ref.evaluate(tokens, targets)) < \
        tol_loss * ref.evaluate(tokens, targets)
    assert_close(dev.forward(tokens), ref.forward(tokens), tol_grad, "logits")


# kept against recomputed: on a GPU both precisions at andrea-12m's geometry and GPT-2's
# biased shape in bf16; in the simulator float32 on the smallest model
RECOMPUTE_CASES = ([("fp32", BF16_CASES[0]), ("bf16", BF16_CASES[0]), ("bf16", BF16_CASES[1])]
                   if REAL_SHAPES else [("fp32", CASES[0])])


# the dW GEMMs that read an output a mode recomputes: w_proj's GELU's output, w_fc's ln_2,
# w_qkv's ln_1
RECOMPUTED_READERS = {"gelu": ("mlp.w_proj",), "all": ("attn.w_qkv", "mlp.w_fc", "mlp.w_proj")}


@pytest.mark.parametrize("mode", ["gelu", "all"])
@pytest.mark.parametrize("precision,case", RECOMPUTE_CASES)
def test_recomputing_the_outputs_moves_the_step_by_a_rounding_at_most(precision, case, mode):
    """A Step whose backward writes GELU's output again (mode gelu), or the LayerNorms'
    outputs too (all), gives the loss and the gradients of one that keeps them: the same
    bits, but for the dW GEMMs that read a recomputed operand (w_proj's; all: w_qkv's and
    w_fc's too), within the step's tolerance: the norm's output is rounded as
    (x - mean) * rstd * w + b where the residual forward rounds (x - mean) * (rstd * w) + b,
    and GELU's from the backward's gate (float32 ulps; in bf16 a value now and then on the
    other side of a rounding boundary). Deterministic backends (no float atomics), the same weights and batch, no
    float64 reference (seconds at real shapes); every buffer poisoned, so an output the
    backward fails to write again shows."""
    name, overrides, B, T = case
    cfg = get_config(name, **overrides)
    rng = np.random.default_rng()
    tokens, targets = (rng.integers(0, cfg.tokens, (B, T)) for _ in range(2))
    runs = []
    for recompute in ("off", mode):
        model = GPT(cfg, backend=CudaBackend(deterministic=True), seed=7, precision=precision,
                    recompute=recompute)
        step = Step(model, AdamW(model, AdamWConfig(lr=1e-3)), B, T)
        poison(model.backend, step.buffers)
        step.run(tokens, targets)
        runs.append((step.metrics()["loss"][0],
                     model.layout.views(model.backend.to_host(model.grads_flat))))
    (kept_loss, kept), (loss, grads) = runs
    assert loss == kept_loss and all(np.isfinite(g).all() for g in kept.values())
    assert (model.recompute, step.buffers.rewritten) == (
        mode, set(activations.RECOMPUTED[mode]))
    again = {n for n in kept if n.endswith(RECOMPUTED_READERS[mode])}
    for n in kept.keys() - again:
        np.testing.assert_array_equal(grads[n].view(np.uint32), kept[n].view(np.uint32),
                                      err_msg=n)
    errors = {n: rel_error(grads[n], kept[n]) for n in again}
    worst = max(errors, key=errors.get)
    assert errors[worst] < (TOL_BF16_GRAD if precision == "bf16" else TOL_F32_MODEL), \
        f"gradient {worst}: {errors[worst]:.2e}"


# the same bits: on a GPU both precisions at andrea-12m's geometry; in the simulator, whose
# threads rarely race, float32 on the smallest model, which the tests of the kernels
# (a launch's bits whatever its block) and the compile check (no atomics) back up
SAME_BITS_CASES = ([("fp32", BF16_CASES[0], 3), ("bf16", BF16_CASES[0], 3)] if REAL_SHAPES
                   else [("fp32", BF16_CASES[0], 1)])


@pytest.mark.parametrize("precision,case,steps", SAME_BITS_CASES)
def test_two_runs_of_a_seed_give_the_same_bits(precision, case, steps, monkeypatch):
    """Two runs of a few Steps from one seed on the same batches end with the same
    parameters and moments, bit for bit: no float atomics in the gradient (the LayerNorm
    weights' sums run in a fixed order; the deterministic backend sorts the embedding's
    positions instead of scattering them by atomics, and its split-K's blocks add their
    parts in the order of their splits, not by atomics). On a GPU, where
    atomics add in the order the blocks finish, this is the check that means most; there
    a third run adds the split-K's parts on the step's stream itself, not beside it
    (gemm.turns.BESIDE off): the same bits again."""
    name, overrides, B, T = case
    cfg = get_config(name, **overrides)
    rng = np.random.default_rng()
    batches = [tuple(rng.integers(0, cfg.vocab_size, (B, T)) for _ in range(2))
               for _ in range(steps)]
    runs = []
    for beside in (True, True, False) if REAL_SHAPES else (False, False):
        monkeypatch.setattr(turns, "BESIDE", beside)
        model = GPT(cfg, backend=CudaBackend(deterministic=True), seed=5, precision=precision)
        optimizer = AdamW(model, AdamWConfig(lr=1e-2, warmup_steps=1, total_steps=steps))
        step = Step(model, optimizer, B, T)
        for tokens, targets in batches:
            step.run(tokens, targets)
        step.metrics()
        runs.append((model.backend.to_host(model.params_flat),
                     *optimizer.state_dict()[0].values()))
    for first, *others in zip(*runs):
        for other in others:
            np.testing.assert_array_equal(first.view(np.uint32), other.view(np.uint32))


def test_a_deterministic_backend_orders_its_split_k(monkeypatch):
    """The op hands the bf16 GEMM deterministic=True on a deterministic backend (its
    splits then add in a fixed order), and its default split either way: recorded, not
    run."""
    from microgpt.kernels.gemm import bf16

    calls = []
    monkeypatch.setattr(bf16, "matmul_bf16", lambda *args, **kwargs: calls.append(kwargs))
    out = CudaBackend().zeros((8, 8))
    a, b = (CudaBackend().zeros((64, 8), np.dtype(np.uint16)) for _ in range(2))
    for deterministic in (True, False):
        CudaBackend(deterministic=deterministic).matmul(out, a, b, transpose_a=True,
                                                        accumulate=True)
    assert [(call["split_k"], call["deterministic"]) for call in calls] == [
        (None, True), (None, False)]
