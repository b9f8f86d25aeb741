"""tools/converge.py: microgpt's NumPy trainer against PyTorch on the CPU at a tiny size.

Needs torch (the [bench] extra); without it every test here skips, saying so. The GPU
profile runs them where torch is installed.
"""
import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from microgpt import GPT, get_config

torch = pytest.importorskip("torch", reason="tools/converge.py compares against PyTorch, "
                            "which is not installed (pip install \".[bench]\")")

TOOLS = Path(__file__).resolve().parents[1] / "tools"


def load_tool():
    sys.path.insert(0, str(TOOLS))          # as `python tools/converge.py` runs: torch_gpt
    spec = importlib.util.spec_from_file_location("converge", TOOLS / "converge.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


converge = load_tool()
from torch_gpt import torch_gpt  # noqa: E402  (tools/ is on the path now)

CFG = get_config("microgpt", n_layer=2, vocab_size=256)


def test_the_pytorch_model_starts_from_microgpts_init_exactly():
    """The init copied in reads back bit for bit, and the PyTorch model computes microgpt's
    loss on it (a transposed matrix would read back exactly and compute another loss)."""
    rng = np.random.default_rng()
    model = GPT(CFG, backend="numpy", seed=int(rng.integers(1000)))
    init = model.state_dict()
    tmodel = torch_gpt(CFG, "cpu")
    converge.load_into_torch(tmodel, init)
    back = converge.from_torch_model(tmodel, init)
    for name, value in init.items():
        np.testing.assert_array_equal(back[name].view(np.uint32), value.view(np.uint32), name)
    idx, targets = (rng.integers(0, 256, (2, CFG.context)) for _ in range(2))
    ours = model.evaluate(idx.astype(np.int32), targets.astype(np.int32))
    with torch.no_grad():
        theirs = float(tmodel(torch.from_numpy(idx), torch.from_numpy(targets)))
    assert abs(ours - theirs) <= 1e-5 * ours


def test_load_into_torch_refuses_a_parameter_it_did_not_copy():
    init = GPT(CFG, backend="numpy", seed=1).state_dict()
    tmodel = torch_gpt(CFG, "cpu")
    converge.load_into_torch(tmodel, init)
    broken = dict(init)
    broken["h.1.mlp.w_fc"] = np.nextafter(init["h.1.mlp.w_fc"], np.float32(1))  # one ulp
    with pytest.raises(AssertionError, match="h.1.mlp.w_fc"):
        converge.check_holds(tmodel, broken)


def test_both_trainers_on_the_cpu(tmp_path, monkeypatch):
    """Two seeds of a few steps, each trainer in a process of its own: same init, same
    batches, same AdamW and schedule, so the float32 trajectories agree to rounding; each
    wall clock from its process's command, at step 1 and every log point; the report, the
    plot and the numbers written."""
    # the trainers' processes inherit it: at this size threads only wait on each other
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    rng = np.random.default_rng(0)
    words = "def class return import self for in if else while yield lambda".split()
    (tmp_path / "corpus.txt").write_text("\n".join(
        " ".join(rng.choice(words, 10)) for _ in range(400)))
    out = tmp_path / "run"
    status = converge.main([
        "--device", "cpu", "--config", "microgpt", "--n-layer", "2", "--tokenizer", "bytes",
        "--data", str(tmp_path / "corpus.txt"), "--cache-dir", str(tmp_path / "cache"),
        "--steps", "8", "--batch-size", "4", "--lr", "3e-3", "--seeds", "0", "1",
        "--eval-every", "4", "--log-every", "2", "--curve-windows", "8", "--out", str(out)])
    assert status == 0
    numbers = json.loads(out.with_suffix(".json").read_text())
    records = {(r["trainer"], r["seed"]): r for r in numbers["records"]}
    for seed in (0, 1):
        mg, pt = records["microgpt", seed], records["pytorch", seed]
        assert len(mg["losses"]) == len(pt["losses"]) == 8
        np.testing.assert_allclose(mg["losses"], pt["losses"], rtol=1e-5)
        assert abs(mg["final"] - pt["final"]) <= 1e-5 * pt["final"]
        assert [p[0] for p in mg["curve"]] == [p[0] for p in pt["curve"]] == [4, 8]
        assert mg["losses"][-1] < mg["losses"][0]          # it trained
        for r in (mg, pt):
            steps, walls = zip(*r["times"])
            assert steps == (1, 2, 4, 6, 8)
            assert 0 < walls[0] and np.all(np.diff(walls) > 0)     # the start-up counted
    assert records["microgpt", 0]["losses"] != records["microgpt", 1]["losses"]
    table = out.with_suffix(".md").read_text()
    assert "| 0 |" in table and "| 1 |" in table and "python tools/converge.py" in table
    assert "PyTorch start-up s" in table
    assert out.with_suffix(".png").stat().st_size > 10_000


def test_bad_output_directory(tmp_path, capsys):
    assert converge.main(["--device", "cpu", "--out", str(tmp_path / "no" / "run")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "does not exist" in err
    assert not (tmp_path / "no").exists()
