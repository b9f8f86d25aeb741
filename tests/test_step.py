"""microgpt.step.Step on the NumPy backend: the same arithmetic as the model's own calls,
the metrics log read back in order, and its limits. (On the cuda backend, captured against
eager: tests/test_cuda_model.py.)"""
import dataclasses

import numpy as np
import pytest

from microgpt import GPT, get_config, step as step_module
from microgpt.backend import NumpyBackend
from microgpt.optim import AdamW, AdamWConfig, lr_at
from microgpt.step import Step

CFG = get_config("microgpt", vocab_size=24, n_layer=2, d_model=16, n_head=2, context=8)
OPT = AdamWConfig(lr=1e-2, warmup_steps=2, total_steps=6)


def batches(n, B=3, T=8, seed=0):
    rng = np.random.default_rng(seed)
    return [(rng.integers(0, CFG.vocab_size, (B, T)), rng.integers(0, CFG.vocab_size, (B, T)))
            for _ in range(n)]


def test_step_equals_the_model_calls():
    """Five steps through Step, and through forward_backward + AdamW.step(lr_at(...)) on a
    twin: the same losses, norms and lrs, and the same parameters and moments, exactly (the
    NumPy backend computes the schedule with the same float64 arithmetic as lr_at)."""
    model, twin = GPT(CFG, seed=1), GPT(CFG, seed=1)
    opt, twin_opt = AdamW(model, OPT), AdamW(twin, OPT)
    step = Step(model, opt, 3, 8)
    want = {"loss": [], "grad_norm": [], "lr": []}
    for i, (tokens, targets) in enumerate(batches(5)):
        step.run(tokens, targets)
        want["loss"].append(twin.forward_backward(tokens, targets))
        want["grad_norm"].append(twin_opt.step(lr_at(i, OPT)))
        want["lr"].append(lr_at(i, OPT))
    got = step.metrics()
    for column, values in want.items():
        np.testing.assert_allclose(got[column], values, rtol=1e-6, err_msg=column)
    for name, value in twin.state_dict().items():
        np.testing.assert_array_equal(model.state_dict()[name], value, err_msg=name)
    np.testing.assert_array_equal(opt.state_dict()[0]["m"], twin_opt.state_dict()[0]["m"])
    assert opt.step_count == twin_opt.step_count == 5
    assert step.metrics()["loss"].size == 0          # read once


def test_metrics_come_back_in_order_across_the_log_end(monkeypatch):
    """A log of 3 rows: 2 steps, then 3 (wrapping around), each read in step order; a 4th
    unread step is refused rather than overwriting the first."""
    monkeypatch.setattr(step_module, "LOG_ROWS", 3)
    model, twin = GPT(CFG, seed=2), GPT(CFG, seed=2)
    step, twin_opt = Step(model, AdamW(model, OPT), 3, 8), AdamW(twin, OPT)
    data = batches(5, seed=1)
    want = []
    for i, (tokens, targets) in enumerate(data):
        want.append(twin.forward_backward(tokens, targets))
        twin_opt.step(lr_at(i, OPT))
    for start, stop in ((0, 2), (2, 5)):
        for tokens, targets in data[start:stop]:
            step.run(tokens, targets)
        np.testing.assert_allclose(step.metrics()["loss"], want[start:stop], rtol=1e-6)
    for tokens, targets in data[:3]:
        step.run(tokens, targets)
    with pytest.raises(RuntimeError, match="3 steps since the last metrics"):
        step.run(*data[3])


def test_evaluate_is_the_model_loss_and_changes_nothing():
    model = GPT(CFG, seed=3)
    step = Step(model, AdamW(model, OPT), 3, 8)
    tokens, targets = batches(1, seed=2)[0]
    before = model.state_dict()
    assert step.evaluate(tokens, targets) == pytest.approx(model.evaluate(tokens, targets),
                                                           rel=1e-12)
    for name, value in before.items():
        np.testing.assert_array_equal(model.state_dict()[name], value)
    assert step.optimizer.step_count == 0


def test_evaluate_scores_a_short_batch_on_its_own_rows():
    """A batch of fewer rows than the step's (the whole validation split's last) gets the
    model's loss on those rows alone: the rows that pad it to the step's shape are not
    scored (with 2 rows, a scored copy of the first would weigh it twice)."""
    model = GPT(CFG, seed=6)
    step = Step(model, AdamW(model, OPT), 3, 8)
    tokens, targets = batches(1, seed=4)[0]
    step.evaluate(*batches(1, seed=5)[0])
    for rows in (2, 1):
        assert step.evaluate(tokens[:rows], targets[:rows]) == pytest.approx(
            model.evaluate(tokens[:rows], targets[:rows]), rel=1e-6)


@pytest.mark.parametrize("tokens,targets,message", [
    (np.zeros((2, 8), int), np.zeros((3, 8), int), r"tokens: expected shape \(3, 8\)"),
    (np.zeros((3, 8), int), np.zeros((3, 7), int), r"targets: expected shape \(3, 8\)"),
    (np.full((3, 8), 24), np.zeros((3, 8), int), r"token indices must lie in \[0, 24\)"),
    (np.zeros((3, 8), int), np.full((3, 8), -1), r"token indices must lie in \[0, 24\)"),
])
def test_bad_batches_are_refused(tokens, targets, message):
    model = GPT(CFG, seed=4)
    step = Step(model, AdamW(model, OPT), 3, 8)
    with pytest.raises(ValueError, match=message):
        step.run(tokens, targets)
    assert step.unread == 0 and step.optimizer.step_count == 0


def test_a_sequence_longer_than_the_context_is_refused():
    model = GPT(CFG, seed=5)
    with pytest.raises(ValueError, match="sequence length 9 exceeds the model's context 8"):
        Step(model, AdamW(model, OPT), 3, 9)


class CapturingBackend(NumpyBackend):
    """The NumPy backend with the cuda backend's life cycle of a Step (eager, then captured
    once, then replayed): a capture calls enqueue, as the cuda backend's does (here that
    also computes, which this backend's tests do not read), and returns a graph that
    notes in events each replay and its destruction."""
    graphs = True

    def __init__(self, events):
        super().__init__()
        self.events = events

    def capture(self, enqueue):
        enqueue()
        return RecordedGraph(self.events)


class RecordedGraph:
    def __init__(self, events):
        self.events = events

    def replay(self):
        self.events.append("replayed")

    def __del__(self):
        self.events.append("graph destroyed")


class RecordedSync:
    """A gradient sync whose release stands for its NCCL communicator's destruction."""

    def __init__(self, events):
        self.events, self.ranges = events, 0

    def ready(self, lo, hi):
        self.ranges += 1

    def finish(self):
        pass

    def __del__(self):
        self.events.append("sync released")


def test_a_step_destroys_its_graph_before_it_releases_the_sync():
    """NCCL destroys a communicator only once every CUDA graph that captured its calls is
    gone, and waits for that forever: a Step's captured graph must be destroyed before the
    gradient sync whose all-reduces it holds is released (the other order hung both ranks
    of tests/test_distributed.py at exit on two H200s). Three steps: eager, captured,
    replayed; then the Step, the only holder of both, is let go."""
    events = []
    model = GPT(CFG, backend=CapturingBackend(events), seed=6)
    sync = RecordedSync(events)
    step = Step(model, AdamW(model, OPT), 3, 8, sync=sync)
    for tokens, targets in batches(3, seed=3):
        step.run(tokens, targets)
    # a step's ranges: a block's matrices each, wpe, the norms and wte
    assert sync.ranges == 2 * (CFG.n_layer + 3) and events == ["replayed"] * 2
    del sync        # the Step now holds the sync alone
    del step
    assert events == ["replayed"] * 2 + ["graph destroyed", "sync released"]


@pytest.mark.parametrize("accum,bias", [(2, False), (3, False), (3, True)])
def test_accumulating_micro_batches_equals_one_step_on_the_whole_batch(accum, bias):
    """Three steps of `accum` micro-batches of 2 sequences, and three of one batch of
    2 x accum: the same gradients (summed over the micro-batches), losses (the mean over
    every micro-batch), norms and parameters, to float32 round-off; the evaluation of a
    micro-batch is the model's. (A parameter's AdamW step is m / sqrt(v), which scales a
    gradient's round-off up where the gradient is near 0: parameters agree to 1e-4 of lr.)
    bias: GPT-2's biases, whose V part of the QKV bias's gradient each micro-batch
    overwrites from b_o's gradient so far (model._qkv_bias_backward)."""
    cfg = dataclasses.replace(CFG, bias=bias)
    model, twin = GPT(cfg, seed=6), GPT(cfg, seed=6)
    step = Step(model, AdamW(model, OPT), 2, 8, accum=accum)
    whole = Step(twin, AdamW(twin, OPT), 2 * accum, 8)
    for tokens, targets in batches(3, B=2 * accum, seed=7):
        step.run(tokens, targets)
        whole.run(tokens, targets)
        np.testing.assert_allclose(model.grads_flat, twin.grads_flat, rtol=1e-5,
                                   atol=1e-6 * np.abs(twin.grads_flat).max())
    got, want = step.metrics(), whole.metrics()
    for column in want:
        np.testing.assert_allclose(got[column], want[column], rtol=2e-6, err_msg=column)
    for name, value in twin.state_dict().items():
        np.testing.assert_allclose(model.state_dict()[name], value, rtol=1e-5,
                                   atol=1e-4 * OPT.lr, err_msg=name)
    tokens, targets = batches(1, B=2, seed=8)[0]
    assert step.evaluate(tokens, targets) == pytest.approx(model.evaluate(tokens, targets),
                                                           rel=1e-12)
    with pytest.raises(ValueError, match=rf"tokens: expected shape \({2 * accum}, 8\)"):
        step.run(tokens, targets)
