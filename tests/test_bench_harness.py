"""tools/benchmarks' harness for the bench scripts (bench/h200-*/): the token batches they
step on, the timing of built steps in alternating rounds and the steps section's MFU, on
the CPU."""
import sys
from pathlib import Path
from unittest import mock

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
from benchmarks import captured_steps, steps, token_batches  # noqa: E402

from microgpt import get_config  # noqa: E402
from microgpt.metrics import flops_per_token  # noqa: E402
from microgpt.data import write_shard  # noqa: E402
from microgpt.step import Step  # noqa: E402


@pytest.mark.parametrize("source", ["uniform", "zipf", "shard"])
def test_batches_are_next_token_pairs_within_the_vocabulary(tmp_path, source):
    rng = np.random.default_rng()
    vocab, B, T = 50, 3, 7
    tokens = rng.integers(0, vocab, 400)
    if source == "shard":
        write_shard(tmp_path / "train.bin", tokens)
        source = str(tmp_path / "train.bin")
    pairs = token_batches.batches(source, vocab, 4, B, T, seed=int(rng.integers(1000)))
    assert len(pairs) == 4
    for inputs, targets in pairs:
        for a in (inputs, targets):
            assert a.shape == (B, T) and a.dtype == np.int32 and a.flags.c_contiguous
            assert 0 <= a.min() and a.max() < vocab
        np.testing.assert_array_equal(inputs[:, 1:], targets[:, :-1])
        if source not in ("uniform", "zipf"):       # each row a window of the shard
            for row, last in zip(inputs, targets[:, -1]):
                window = np.append(row, last)
                assert any(np.array_equal(tokens[s:s + T + 1], window)
                           for s in range(tokens.size - T))
    assert "distinct, the commonest" in token_batches.describe(pairs[0][0])


def test_a_built_step_runs_twice_under_its_patches_and_then_without():
    cfg = get_config("microgpt", vocab_size=11)
    rng = np.random.default_rng()
    pairs = token_batches.batches("uniform", 11, 2, 2, 8, seed=int(rng.integers(1000)))
    runs, run = [], Step.run

    def recorded(self, inputs, targets):
        runs.append(inputs.copy())
        return run(self, inputs, targets)
    said = []
    step = captured_steps.built_step(cfg, 2, 8, pairs, backend="numpy", precision="fp32",
                                     patches=[(Step, "run", recorded)], say=said.append)
    assert len(runs) == 2 and all(np.array_equal(r, p[0]) for r, p in zip(runs, pairs))
    assert Step.run is run and said[0].startswith("built, compiled and captured in")
    assert 0 < captured_steps.step_seconds(step, pairs, 2) < np.inf
    assert len(runs) == 2                       # (the patch's gone: unrecorded since)


def test_the_variants_alternate_and_keep_their_best_round():
    order = []

    class Timed:
        def __init__(self, name, seconds):
            self.name, self.seconds, self.runs = name, iter(seconds), 0

        def run(self, inputs, targets):
            self.runs += 1
            order.append(self.name)

        def metrics(self):
            pass
    steps = {"a": Timed("a", []), "b": Timed("b", [])}
    # each round's time: the clock read by step_seconds, one round of each after the other
    clock = iter([0.0, 3.0, 10.0, 12.0, 20.0, 21.0, 30.0, 34.0])
    with mock.patch.object(captured_steps.time, "perf_counter", lambda: next(clock)):
        best = captured_steps.best_of_rounds(steps, [(1, 2)], reps=2, rounds=2)
    assert best == {"a": 0.5, "b": 1.0}
    assert order == ["a"] * 3 + ["b"] * 3 + ["a"] * 3 + ["b"] * 3


def test_the_steps_report_gives_each_step_its_mfu():
    """Each row's MFU: its tokens/s times its training FLOPs a token over 790 TFLOP/s, for
    microgpt's bf16 graph and torch.compile (n/a where torch.compile did not run); the
    geometries' T is their context, over which flops_per_token counts attention."""
    for label, name, overrides, B, T in steps.GEOMETRIES:
        assert get_config(name, **overrides).context == T, label
    rng = np.random.default_rng()
    rows, want = [], []
    for label, compiled in (("andrea-120m", True), ("andrea-12m", False)):
        fpt = flops_per_token(get_config(label))
        ours, theirs = rng.uniform(1e5, 4e6, 2)
        rows.append(dict(config=label, B=2, T=8, flops_per_token=fpt,
                         ours_bf16_graph_tok_s=ours,
                         torch_compile_tok_s=theirs if compiled else None))
        want.append([f"{ours * fpt / 790e12:.1%}",
                     f"{theirs * fpt / 790e12:.1%}" if compiled else "n/a"])
    lines = steps.steps_report(rows)
    header = next(line for line in lines if line.startswith("| config | B x T | microgpt fp32"))
    assert header.endswith("| microgpt bf16 MFU | torch.compile MFU |")
    for row, cells in zip(rows, want):
        line = next(line for line in lines if line.startswith(f"| {row['config']} | 2 x 8 |"))
        assert line.split(" | ")[-2:] == [cells[0], cells[1] + " |"]


def test_the_steps_report_sets_the_recomputed_step_beside_the_kept_one():
    """The memory table: the kept step's GiB, GELU's recomputed (gelu) and all three
    outputs recomputed (all) beside torch.compile's (n/a where one did not run), their
    tokens/s and each recomputed step's time over the kept one's; a row with neither a
    recomputed run nor torch.compile's has no line there, and one of torch.compile's
    alone (--steps-runs torch_compile) n/a for microgpt's."""
    rng = np.random.default_rng()
    kept, gelu, again, kept_gib, gelu_gib, again_gib, theirs_gib = rng.uniform(1, 5e5, 7)
    rows = [dict(config="gpt2-xl", B=8, T=1024, flops_per_token=1.0, ours_bf16_graph_tok_s=kept,
                 ours_bf16_gib=kept_gib, ours_bf16_graph_recomputed_tok_s=again,
                 ours_bf16_recomputed_gib=again_gib, ours_bf16_graph_recomputed_gelu_tok_s=gelu,
                 ours_bf16_recomputed_gelu_gib=gelu_gib, torch_compile_gib=theirs_gib),
            dict(config="andrea-12m", B=2, T=8, flops_per_token=1.0, ours_bf16_graph_tok_s=kept,
                 ours_bf16_gib=kept_gib),
            dict(config="gpt2-medium", B=16, T=1024, flops_per_token=1.0,
                 ours_bf16_graph_recomputed_gelu_tok_s=gelu,
                 ours_bf16_recomputed_gelu_gib=gelu_gib, torch_compile_gib=theirs_gib),
            dict(config="andrea-120m", B=16, T=1024, flops_per_token=1.0,
                 torch_compile_gib=theirs_gib)]
    lines = steps.steps_report(rows)
    header = lines.index(next(line for line in lines if line.startswith("| config | kept GiB")))
    assert lines[header] == (
        "| config | kept GiB | gelu GiB | all GiB | torch.compile GiB | kept tok/s | gelu "
        "tok/s | all tok/s | gelu step time / kept | all step time / kept |")
    assert lines[header + 2] == (f"| gpt2-xl | {kept_gib:.2f} | {gelu_gib:.2f} | "
                                 f"{again_gib:.2f} | {theirs_gib:.2f} | {kept:,.0f} | "
                                 f"{gelu:,.0f} | {again:,.0f} | {kept / gelu:.3f} | "
                                 f"{kept / again:.3f} |")
    assert lines[header + 3] == (f"| gpt2-medium | n/a | {gelu_gib:.2f} | n/a | "
                                 f"{theirs_gib:.2f} | n/a | {gelu:,.0f} | n/a | n/a | n/a |")
    assert lines[header + 4] == (f"| andrea-120m | n/a | n/a | n/a | {theirs_gib:.2f} | n/a | "
                                 "n/a | n/a | n/a | n/a |")
    assert lines[header + 5] == ""


def test_the_steps_runs_take_the_recompute_modes_asked_for():
    """--steps-recompute's modes: microgpt's bf16 graph with each beside the kept one,
    whatever --steps-runs names (so one call sets gpt2-medium's gelu step beside
    torch.compile); a recomputed run not asked for only where --steps-runs names it; a
    geometry of SMALL adds the float32 and the deterministic steps."""
    def names(small=False, only_runs=None, recompute=()):
        runs = steps.step_runs(small, True, only_runs, recompute)
        for name, precision, graph, deterministic, mode in runs:
            assert name.startswith(f"ours_{precision}_{'graph' if graph else 'eager'}")
            assert ("_recomputed" in name, "_deterministic" in name) == (mode != "off",
                                                                          deterministic)
            assert name.endswith(steps.RECOMPUTED_NAMES[mode])
        return [name for name, *_ in runs]
    assert names() == ["ours_bf16_eager", "ours_bf16_graph"]
    assert names(small=True) == ["ours_fp32_graph", "ours_bf16_eager", "ours_bf16_graph",
                                 "ours_bf16_graph_deterministic"]
    assert names(recompute=("gelu",)) == ["ours_bf16_eager", "ours_bf16_graph",
                                          "ours_bf16_graph_recomputed_gelu"]
    assert names(only_runs=["ours_bf16_graph", "torch_compile"], recompute=("gelu",)) == [
        "ours_bf16_graph", "ours_bf16_graph_recomputed_gelu"]
    assert names(only_runs=["ours_bf16_graph_recomputed"]) == ["ours_bf16_graph_recomputed"]
    assert names(only_runs=["torch_compile"], recompute=("gelu", "all")) == [
        "ours_bf16_graph_recomputed_gelu", "ours_bf16_graph_recomputed"]
    assert names(only_runs=["torch_compile"]) == []