"""A run's numbers for tools: the metrics file, the model's FLOPs and MFU, the loss plot.

RUN/metrics.jsonl holds one JSON object per log line of the trainer, appended and flushed
as the run goes:

    {"step": 200, "loss": 4.43, "val_loss": 4.22, "lr": 0.0029, "grad_norm": 0.88,
     "tokens_per_s": 15798.0, "mfu": 0.231, "elapsed_s": 26.1}

val_loss only where it was measured; mfu is null where the device's peak is unknown;
elapsed_s counts the training time of this run and the runs it resumes. A resumed run
first drops the lines after its checkpoint's step (steps it trains again), then continues
the file. loss.png is drawn from it, and ``python -m microgpt.plot`` overlays runs.
"""
import json
import os
import time
from pathlib import Path

import numpy as np

from microgpt.checkpoint import atomic_file
from microgpt.errors import UserError
from microgpt.params import param_specs

METRICS = "metrics.jsonl"
PEAK_ENV = "MICROGPT_PEAK_TFLOPS"

# The peaks of the GPUs we know, in FLOP/s, per precision of the step; the first match of
# the device name wins. fp32 runs on the CUDA cores (no tensor cores, no TF32): NVIDIA's
# "FP32" datasheet figure. bf16's FLOPs are nearly all on the tensor cores: the dense
# (not the 2:4 sparse) "BF16 Tensor Core" figure. From the H100/H200 and A100 datasheets;
# another device: set MICROGPT_PEAK_TFLOPS (a CPU has no MFU otherwise).
PEAK_FLOPS = {
    "fp32": (("H200", 67e12), ("H100 NVL", 60e12), ("H100 PCIe", 51e12), ("H100", 67e12),
             ("A100", 19.5e12)),
    "bf16": (("H200 NVL", 835e12), ("H200", 989e12), ("H100 NVL", 835e12),
             ("H100 PCIe", 756e12), ("H100", 989e12), ("A100", 312e12)),
}


def device_peak(name, precision):
    """The datasheet peak of a device named name in precision, or None."""
    return next((peak for key, peak in PEAK_FLOPS[precision] if key in name), None)


# ----------------------------------------------------------------------------------
# FLOPs and MFU

def flops_per_token(cfg):
    """Training FLOPs (forward + backward) per token of a context-long sequence.

    6 per weight of every matmul (2 forward: a multiply and an add; 4 backward: dX and dW),
    read from the parameter table: every matrix but wpe, which is only looked up (wte
    counts as the tied LM head). Plus attention's two products, QK^T and PV, 2 * 2 *
    context * d_model FLOPs a token a layer forward, 3x that with the backward, counted
    over the full T x T square as PaLM (appendix B) and nanoGPT count them, so MFU
    compares with theirs."""
    matmul_weights = sum(s.size for s in param_specs(cfg)
                         if len(s.shape) == 2 and s.name != "wpe")
    return 6 * matmul_weights + 12 * cfg.n_layer * cfg.context * cfg.d_model


def peak_flops(backend, precision="fp32"):
    """-> (the FLOP/s peak in precision of the device the backend runs on, or None; its
    name). MICROGPT_PEAK_TFLOPS, when set, is the peak."""
    if os.environ.get(PEAK_ENV):
        try:
            peak = float(os.environ[PEAK_ENV]) * 1e12
        except ValueError:
            raise UserError(f"{PEAK_ENV}={os.environ[PEAK_ENV]!r} is not a number; set it to "
                            "the device's peak in TFLOP/s, or unset it") from None
        if not 0 < peak < float("inf"):
            raise UserError(f"{PEAK_ENV} must be a positive number of TFLOP/s")
        return peak, f"{PEAK_ENV}"
    if backend.name != "cuda":
        return None, "the CPU"
    from numba import cuda
    name = getattr(cuda.get_current_device(), "name", "the CUDA simulator")
    name = name.decode() if isinstance(name, bytes) else str(name)
    return device_peak(name, precision), name


class Utilisation:
    """Model FLOPs utilisation: tokens/s x FLOPs per token over the peak of all devices."""

    def __init__(self, cfg, backend, devices=1, precision="fp32"):
        self.flops_per_token = flops_per_token(cfg)
        peak, self.device = peak_flops(backend, precision)
        self.peak = peak * devices if peak else None

    def mfu(self, tokens_per_s):
        """A fraction, or None where the peak is unknown."""
        return tokens_per_s * self.flops_per_token / self.peak if self.peak else None


# ----------------------------------------------------------------------------------
# the metrics file

def read_metrics(path):
    """The records of a metrics file, in order. A last line cut short (a run killed while
    writing it) is left out; any other line that is not a JSON object with a step raises
    ValueError naming it."""
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    records = []
    for number, line in enumerate(lines, 1):
        try:
            record = json.loads(line)
            if not isinstance(record, dict) or type(record.get("step")) is not int:
                raise ValueError
        except ValueError:
            if number == len(lines):
                break
            raise ValueError(f"{path} line {number} is not a metrics record") from None
        records.append(record)
    return records


class MetricsLog:
    """RUN/metrics.jsonl of a training run (rank 0 writes it). resumed_step: the step of
    the checkpoint a resumed run starts from, else 0."""

    def __init__(self, run_dir, resumed_step=0):
        self.path = Path(run_dir) / METRICS
        self.run_dir = run_dir
        kept = []
        if resumed_step and self.path.exists():
            try:
                kept = [r for r in read_metrics(self.path) if r["step"] <= resumed_step]
            except ValueError as err:
                raise UserError(f"{err}; move {self.path} away to resume (a new one is "
                                "started)") from None
            atomic_file(self.path, lambda tmp: tmp.write_text(
                "".join(json.dumps(r) + "\n" for r in kept), encoding="utf-8"))
        self.elapsed_before = float(kept[-1].get("elapsed_s", 0.0)) if kept else 0.0
        self.started = time.perf_counter()

    def write(self, **record):
        """Append one record (None values left out but for mfu) and flush it."""
        record = {k: v for k, v in record.items() if v is not None or k == "mfu"}
        record["elapsed_s"] = round(self.elapsed_before + time.perf_counter() - self.started, 3)
        try:
            with open(self.path, "a", encoding="utf-8") as f:
                f.write(json.dumps(record, default=float) + "\n")
        except OSError as err:
            raise UserError(f"cannot write {self.path} ({err.strerror}); free some space, "
                            f"then continue with --resume {self.run_dir}") from None


# ----------------------------------------------------------------------------------
# plots

def plot_losses(records, entropy, path):
    """loss.png: train loss at every logged step, val loss where measured, the unigram
    entropy for scale."""
    from matplotlib.figure import Figure     # 0.9 s of the trainer's start, needed at its end

    fig = Figure(figsize=(8, 5), tight_layout=True)
    ax = fig.add_subplot()
    draw_losses(ax, records, "C0", "")
    ax.axhline(entropy, ls="--", color="gray", label="unigram entropy")
    ax.set_xlabel("step")
    ax.set_ylabel("loss (nats/token)")
    ax.legend()
    fig.savefig(path, dpi=100, format="png")


def draw_losses(ax, records, color, name):
    """One run's train loss (a line) and val loss (points joined) on ax."""
    steps = np.array([r["step"] for r in records])
    ax.plot(steps, [r["loss"] for r in records], lw=0.8, color=color, label=f"{name}train")
    val = [(r["step"], r["val_loss"]) for r in records if "val_loss" in r]
    if val:
        ax.plot(*zip(*val), "o--", ms=3, color=color, label=f"{name}val")
