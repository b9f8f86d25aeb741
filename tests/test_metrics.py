"""The metrics file, FLOPs per token, MFU and the overlay plot (microgpt/metrics.py, plot.py)."""
import json

import numpy as np
import pytest

from microgpt import plot, train
from microgpt.backend import NumpyBackend
from microgpt.config import get_config
from microgpt.errors import UserError
from microgpt.metrics import (METRICS, PEAK_ENV, MetricsLog, Utilisation, device_peak,
                              flops_per_token, read_metrics)

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("corpus")
    rng = np.random.default_rng(0)
    words = ["def", "return", "self", "(", ")", ":", "=", "1", "\n", "    "]
    for i in range(10):
        (root / f"doc{i}.py").write_text(" ".join(rng.choice(words, 80)))
    return root


@pytest.fixture
def tiny(corpus, tmp_path):
    return ["--config", "microgpt", "--data", str(corpus), "--cache-dir", str(tmp_path / "cache"),
            "--tokenizer", "bytes", "--batch-size", "2", "--eval-batches", "1",
            "--log-every", "2", "--eval-every", "4", "--sample-every", "0", "--device", "cpu"]


def train_main(args, capsys):
    status = train.main([str(a) for a in args])
    out, err = capsys.readouterr()
    assert status == 0, err
    return out


# ----------------------------------------------------------------------------------
# FLOPs and MFU

def test_flops_per_token_of_andrea_120m_by_hand():
    """6 x the matmul weights (wte as the LM head, 12 blocks of 12 d^2; not wpe nor the
    LayerNorms) + 12 L T d for attention: 6 x 123,568,128 + 113,246,208."""
    L, d, T, V = 12, 768, 1024, 50304
    assert 6 * (V * d + L * 12 * d * d) + 12 * L * T * d == 854_654_976
    assert flops_per_token(get_config("andrea-120m")) == 854_654_976


def test_mfu_against_a_given_peak(monkeypatch):
    monkeypatch.setenv(PEAK_ENV, "100")
    cfg = get_config("andrea-12m")
    two = Utilisation(cfg, NumpyBackend(), devices=2)
    assert two.peak == 200e12
    assert two.mfu(1e5) == pytest.approx(1e5 * flops_per_token(cfg) / 200e12)


def test_no_mfu_without_a_known_peak(monkeypatch):
    monkeypatch.delenv(PEAK_ENV, raising=False)
    assert Utilisation(get_config("andrea-12m"), NumpyBackend()).mfu(1e5) is None


def test_each_precision_has_its_own_peak():
    """bf16 is measured against the tensor cores' dense bf16 rate, fp32 against the CUDA
    cores': an H200's 989 and 67 TFLOP/s; the NVL part is matched before the SXM one."""
    assert device_peak("NVIDIA H200", "bf16") == 989e12
    assert device_peak("NVIDIA H200", "fp32") == 67e12
    assert device_peak("NVIDIA H200 NVL", "bf16") == 835e12
    assert device_peak("NVIDIA H100 PCIe", "bf16") == 756e12
    assert device_peak("a GPU we do not know", "bf16") is None


def test_a_given_peak_holds_in_bf16(monkeypatch):
    from microgpt.cuda_backend import CudaBackend

    monkeypatch.setenv(PEAK_ENV, "900")
    assert Utilisation(get_config("andrea-12m"), CudaBackend(), precision="bf16").peak == 900e12


@pytest.mark.parametrize("value", ["fast", "0", "-3", "inf"])
def test_a_bad_peak_is_one_line(monkeypatch, value):
    monkeypatch.setenv(PEAK_ENV, value)
    with pytest.raises(UserError, match=PEAK_ENV):
        Utilisation(get_config("andrea-12m"), NumpyBackend())


# ----------------------------------------------------------------------------------
# the metrics file of a run

def test_a_run_writes_a_record_per_log_line_and_a_resume_continues_it(tiny, tmp_path, capsys,
                                                                      monkeypatch):
    monkeypatch.setenv(PEAK_ENV, "0.5")
    out = tmp_path / "run"
    log = train_main([*tiny, "--steps", 8, "--stop-at", 4, "--out", out], capsys)
    assert "mfu: " in log and "0.5 TFLOP/s" in log
    lines = [line for line in log.splitlines() if line.startswith("step ")]
    assert all(" | mfu " in line for line in lines)
    first = read_metrics(out / METRICS)
    assert [r["step"] for r in first] == [1, 2, 4]
    # a killed run logged steps past its checkpoint, the last line cut short
    with open(out / METRICS, "a") as f:
        f.write(json.dumps({**first[-1], "step": 6}) + "\n" + '{"step": 7, "lo')
    train_main(["--resume", out, "--log-every", 2], capsys)
    records = read_metrics(out / METRICS)
    assert [r["step"] for r in records] == [1, 2, 4, 6, 8]
    assert records[:3] == first
    assert [r["step"] for r in records if "val_loss" in r] == [4, 8]
    for r in records:
        assert set(r) - {"val_loss"} == {"step", "loss", "lr", "grad_norm", "tokens_per_s",
                                         "mfu", "elapsed_s"}
        assert r["mfu"] == pytest.approx(
            r["tokens_per_s"] * flops_per_token(get_config("microgpt", vocab_size=256))
            / 0.5e12, rel=1e-3)
    elapsed = [r["elapsed_s"] for r in records]
    assert elapsed == sorted(elapsed) and elapsed[0] > 0
    assert (out / "loss.png").read_bytes()[:8] == PNG


def test_a_damaged_line_stops_a_resume_in_one_line(tmp_path):
    (tmp_path / METRICS).write_text('{"step": 1}\nnot json\n{"step": 3}\n')
    with pytest.raises(UserError, match=f"line 2 is not a metrics record; move .*{METRICS}"):
        MetricsLog(tmp_path, resumed_step=3)


def test_a_new_run_starts_no_file_until_it_logs(tmp_path):
    log = MetricsLog(tmp_path)
    assert not (tmp_path / METRICS).exists()
    log.write(step=1, loss=np.float32(2.5), val_loss=None, mfu=None)
    (record,) = read_metrics(tmp_path / METRICS)
    assert record["loss"] == 2.5 and record["mfu"] is None and "val_loss" not in record


# ----------------------------------------------------------------------------------
# python -m microgpt.plot

def test_plot_overlays_runs(tiny, tmp_path, capsys):
    runs = [tmp_path / "a", tmp_path / "b"]
    for run in runs:
        train_main([*tiny, "--steps", 4, "--out", run], capsys)
    for extra in ([], ["--metric", "tokens_per_s", "--x", "elapsed_s"]):
        png = tmp_path / "overlay.png"
        assert plot.main([*map(str, runs), "--out", str(png), *extra]) == 0
        assert png.read_bytes()[:8] == PNG
        assert "wrote" in capsys.readouterr().out


@pytest.mark.parametrize("make, message", [
    (lambda d: None, "has no metrics.jsonl"),
    (lambda d: (d / METRICS).write_text(""), "holds no records yet"),
    (lambda d: (d / METRICS).write_text("[]\n{}\n"), "line 1 is not a metrics record"),
])
def test_plot_of_a_bad_run_is_one_line(tmp_path, capsys, make, message):
    make(tmp_path)
    assert plot.main([str(tmp_path), "--out", str(tmp_path / "x.png")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err
    assert not (tmp_path / "x.png").exists()
