"""tools/converge_report.py: the convergence report's criteria and its rebuilding from a
run's OUT.json, on made-up records (no trainer runs, no torch: CI runs these)."""
import json
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
import converge_report  # noqa: E402  (tools/ is on the path now, as the tool runs)
from converge import Record  # noqa: E402

STEPS = [50, 100, 150, 200]


def record(rng, trainer, seed, start, end, first, ms):
    """A made-up run: its evaluator curve falling from start to end (strictly, with noise
    on the way), its clock from a start-up of first seconds at ms a step."""
    r = Record(trainer, seed)
    fall = np.sort(rng.uniform(0, 1, len(STEPS) - 2))[::-1]
    losses = np.concatenate([[start], end + (start - end) * fall, [end]])
    wall = lambda n: first + ms * 1e-3 * (n - 1)
    r.times = [(1, first)] + [(n, wall(n)) for n in STEPS]
    r.curve = [(n, wall(n), float(v)) for n, v in zip(STEPS, losses)]
    r.losses = list(rng.uniform(3, 6, STEPS[-1]))
    r.final = float(end + rng.uniform(-0.01, 0.01))
    return r


def made_up_run(rng, seeds=(0, 1, 2)):
    """Three seeds where microgpt starts sooner, steps faster and ends near PyTorch."""
    records = []
    for seed in seeds:
        records.append(record(rng, "microgpt", seed, 5.0, rng.uniform(3.1, 3.3),
                              rng.uniform(2, 12), rng.uniform(24, 27)))
        records.append(record(rng, "pytorch", seed, 5.0, rng.uniform(3.1, 3.3),
                              rng.uniform(25, 40), rng.uniform(26, 28)))
    return records


def facts():
    return dict(command="python tools/converge.py --config andrea-120m --vocab-size 4096 "
                "--data /shards --steps 200 --batch-size 16 --lr 6e-4 --warmup 50 --seeds 0 1 "
                "2 --eval-every 50 --out /x/run", date="2026-12-03",
                machine="GPU H200; python 3.12", config=dict(n_layer=12, d_model=768,
                                                              n_head=12, context=1024,
                                                              vocab_size=4096),
                source="token shards /shards", steps=200, batch_size=16, lr=6e-4, warmup=50,
                min_lr_ratio=0.1, precision="bf16", deterministic=False, torch_compile=True,
                windows=846)


def test_reach_interpolates_between_the_curve_points():
    curve = [(50, 10.0, 5.0), (100, 20.0, 4.0), (150, 30.0, 3.0)]
    assert converge_report.reach(curve, 3.5) == pytest.approx((125, 25.0))
    assert converge_report.reach(curve, 3.0) == pytest.approx((150, 30.0))
    assert converge_report.reach(curve, 6.0) == (50, 10.0)       # below it from the start
    assert converge_report.reach(curve, 2.9) is None
    assert converge_report.time_to(curve, 3.5) == pytest.approx(25.0)
    assert converge_report.time_to(curve, 2.9) is None


def test_the_mean_curve_criterion():
    """Read on the curves averaged over seeds (losses and wall times step by step): the
    wall at which microgpt's mean curve reaches PyTorch's mean final curve loss, against
    PyTorch's mean wall to its last step; checked against NumPy's interpolation of the
    mean curves (falling, so interp on them reversed finds the crossing)."""
    rng = np.random.default_rng()
    for _ in range(20):
        records = made_up_run(rng)
        paired, unpaired = converge_report.pairs(records)
        assert not unpaired and sorted(paired) == [0, 1, 2]
        m = converge_report.mean_criterion(paired)
        curves = {t: np.array([[p[1:] for p in r.curve] for r in records if r.trainer == t])
                  for t in converge_report.TRAINERS}
        mg_wall, mg_loss = curves["microgpt"].mean(0).T
        pt_wall, pt_loss = curves["pytorch"].mean(0).T
        assert m["target"] == pytest.approx(pt_loss[-1])
        assert m["walls"]["pytorch"] == pytest.approx(np.mean(
            [r.times[-1][1] for r in records if r.trainer == "pytorch"]))
        if mg_loss[-1] <= pt_loss[-1]:
            expected = np.interp(pt_loss[-1], mg_loss[::-1], mg_wall[::-1])
            assert m["microgpt_reach"][1] == pytest.approx(expected)
            text = converge_report.criterion_text(m, 3)
            assert f"{expected:.1f} s" in text
            assert f"{expected / m['walls']['pytorch']:.2f}x PyTorch's mean wall" in text
        else:
            assert m["microgpt_reach"] is None
            assert "does not reach" in converge_report.criterion_text(m, 3)
        if pt_loss[-1] <= mg_loss[-1]:
            assert m["pytorch_reach"][1] == pytest.approx(
                np.interp(mg_loss[-1], pt_loss[::-1], pt_wall[::-1]))


def test_the_mean_curve_needs_the_same_steps():
    rng = np.random.default_rng()
    a, b = record(rng, "microgpt", 0, 5, 3, 2, 25), record(rng, "microgpt", 1, 5, 3, 2, 25)
    b.curve = b.curve[:-1]
    with pytest.raises(ValueError, match="different steps"):
        converge_report.mean_curve([a, b])


def test_a_seed_without_its_pair_stays_out_of_the_table(tmp_path):
    """A run cut during its last seed: that seed's lone record is said, not compared."""
    rng = np.random.default_rng()
    records = made_up_run(rng)
    lone = record(rng, "microgpt", 3, 5.0, 3.0, 3.0, 25.0)
    lines = converge_report.table(facts(), records + [lone])
    rows = [line for line in lines if line.startswith("| ") and line[2].isdigit()]
    assert [row.split(" | ")[0] for row in rows] == ["| 0", "| 1", "| 2"]
    assert any(line.startswith("Seed 3: microgpt's run alone") for line in lines)
    mg = [r.final for r in records if r.trainer == "microgpt"]
    assert any(f"microgpt {np.mean(mg):.4f} ±" in line for line in lines)
    with pytest.raises(ValueError, match="no seed has both"):
        converge_report.table(facts(), [lone])


def test_the_report_rebuilds_from_its_json(tmp_path):
    """OUT.md rebuilt from OUT.json alone is the one written with the run, and so is one
    from an OUT.json of before session 23 (no machine, date, schedule or data kept: they
    come from its command and the OUT.md beside it)."""
    rng = np.random.default_rng()
    records = made_up_run(rng)
    out = tmp_path / "run"
    converge_report.write(facts(), records, out)
    written = out.with_suffix(".md").read_text()
    assert "the mean curves over 3 seeds" in written
    assert converge_report.main([str(out.with_suffix(".json")), "--out",
                                 str(tmp_path / "again")]) == 0
    assert (tmp_path / "again.md").read_text() == written
    assert (tmp_path / "again.png").stat().st_size > 10_000

    old = json.loads(out.with_suffix(".json").read_text())
    for key in ("machine", "date", "source", "lr", "warmup", "min_lr_ratio"):
        del old[key]
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "run.json").write_text(json.dumps(old))
    (tmp_path / "old" / "run.md").write_text("\n".join(written.splitlines()[:3]))
    converge_report.rebuild(tmp_path / "old" / "run.json", tmp_path / "rebuilt")
    rebuilt = (tmp_path / "rebuilt.md").read_text()
    assert rebuilt == written.replace("Data: token shards /shards", "Data: --data /shards")


def test_bad_arguments(tmp_path, capsys):
    assert converge_report.main([str(tmp_path / "none.json"), "--out", str(tmp_path / "x")]) == 2
    assert converge_report.main([__file__, "--out", str(tmp_path / "no" / "x")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 2 and "no such file" in err and "does not exist" in err


def test_the_run_writes_what_the_rebuild_reads(tmp_path, monkeypatch, capsys):
    """converge.py's call (report, on its Run) keeps in OUT.json every fact of the table."""
    from types import SimpleNamespace

    from microgpt import get_config
    from microgpt.optim import AdamWConfig

    monkeypatch.setattr(converge_report, "versions", lambda device: f"a {device} machine")
    f = facts()
    run = SimpleNamespace(device="cuda", config=get_config("andrea-120m", vocab_size=4096),
                          source=f["source"], steps=200, B=16, precision="bf16",
                          deterministic=False, torch_compile=True,
                          adamw=AdamWConfig(lr=6e-4, warmup_steps=50, total_steps=200))
    out = tmp_path / "run"
    converge_report.report(run, made_up_run(np.random.default_rng()), dict(windows=846),
                           f["command"], out)
    assert "the mean curves over 3 seeds" in capsys.readouterr().out
    converge_report.rebuild(out.with_suffix(".json"), tmp_path / "again")
    assert (tmp_path / "again.md").read_text() == out.with_suffix(".md").read_text()
    assert "Machine: a cuda machine; " in out.with_suffix(".md").read_text()
