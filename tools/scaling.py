#!/usr/bin/env python3
"""Data-parallel scaling: the trainer on one GPU and under mpiexec on N, plain and with
--zero 1, its tokens/s and each GPU's peak memory, in one report (issue 33's figures).

    python tools/scaling.py --gpus 1 2 4 8 --zero 0 1 --out bench/SCALING.md
    python tools/scaling.py --gpus 8 --zero 0 1 --layers 48 --d-model 1600 --heads 25 \\
        --batch-per-gpu 4 --steps 30 --out bench/ZERO-XL.md        # the GPT-2-XL geometry
    python tools/scaling.py --device cpu --config microgpt --vocab-size 256 --gpus 1 2 \\
        --batch-per-gpu 2 --steps 4 --log-every 2 --out /tmp/scaling.md   # on the CPU

Each run is `python -m microgpt.train` (one process for 1, `MPIEXEC -n N` for more) on the
default corpus with byte tokens, --batch-per-gpu sequences a rank (the global batch
grows with N: weak scaling, as docs/gpu.md measured two GPUs), no evaluation, samples or
checkpoints but the last. tokens/s is the trainer's own over the last --log-every steps
(metrics.jsonl), so compilation and the first steps are left out. Peak memory is the most
that nvidia-smi saw used on any of the run's GPUs, sampled every 0.2 s (the CUDA context
and NCCL's buffers included, as a user sees them). Scaling is against the one-GPU run
without ZeRO; "vs plain" against the run on as many GPUs without it.

MPIEXEC (--mpiexec) is the launch as typed, e.g. "mpiexec --allow-run-as-root -x
PYTHONPATH -x NCCL_NVLS_ENABLE" for Open MPI, whose ranks on other hosts see only the
variables named; set NCCL_NVLS_ENABLE=0 where NVLink multicast must stay off
(docs/distributed.md). Writes OUT (markdown: the table, the machine, the versions and every
command) and OUT with .json (every number).
"""
import argparse
import datetime
import json
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import threading
from importlib import metadata
from pathlib import Path

PROG = "scaling.py"


def parse_args(argv):
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    p.add_argument("--gpus", type=int, nargs="+", default=[1, 2, 4, 8], metavar="N",
                   help="world sizes to run (default: 1 2 4 8)")
    p.add_argument("--zero", type=int, nargs="+", choices=(0, 1), default=[0, 1],
                   help="--zero values to run at each world size above 1 (default: 0 1)")
    p.add_argument("--config", default="andrea-120m", help="model config (default: andrea-120m)")
    p.add_argument("--layers", type=int, help="override its n_layer")
    p.add_argument("--d-model", type=int, help="override its d_model")
    p.add_argument("--heads", type=int, help="override its n_head")
    p.add_argument("--vocab-size", type=int, default=50304, help="(default: 50304)")
    p.add_argument("--batch-per-gpu", type=int, default=16, help="sequences a rank (default: 16)")
    p.add_argument("--steps", type=int, default=60, help="steps a run (default: 60)")
    p.add_argument("--log-every", type=int, default=20,
                   help="tokens/s is that of the last this many steps (default: 20)")
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    p.add_argument("--mpiexec", default="mpiexec", help="the launch, as typed (default: mpiexec)")
    p.add_argument("--out", required=True, type=Path, help="the report (markdown)")
    args = p.parse_args(argv)
    for flag in ("gpus", "batch_per_gpu", "steps", "log_every"):
        values = getattr(args, flag)
        if min(values if isinstance(values, list) else [values]) < 1:
            p.error(f"--{flag.replace('_', '-')} must be at least 1")
    if args.log_every > args.steps:
        p.error(f"--log-every {args.log_every} is more than --steps {args.steps}")
    return args


def train_command(args, gpus, zero, out):
    flags = ["--config", args.config, "--tokenizer", "bytes", "--vocab-size",
             str(args.vocab_size), "--device", args.device, "--steps", str(args.steps),
             "--log-every", str(args.log_every), "--batch-size", str(args.batch_per_gpu * gpus),
             "--eval-every", "0", "--eval-batches", "1", "--sample-every", "0",
             "--checkpoint-every", "0", "--out", str(out)]
    for flag, value in (("--n-layer", args.layers), ("--d-model", args.d_model),
                        ("--n-head", args.heads)):
        if value is not None:
            flags += [flag, str(value)]
    train = [sys.executable, "-m", "microgpt.train", *flags]
    if gpus == 1:
        return train
    return [*shlex.split(args.mpiexec), "-n", str(gpus), *train, "--zero", str(zero)]


class MemoryWatch:
    """The most memory nvidia-smi reports used on any GPU while the watch runs, in MiB
    (None without nvidia-smi, or on the CPU)."""

    def __init__(self, enabled):
        self.peak, self._stop = None, threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True) if enabled else None

    def __enter__(self):
        if self._thread:
            self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        if self._thread:
            self._thread.join()

    def _poll(self):
        while not self._stop.wait(0.2):
            try:
                out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used",
                                      "--format=csv,noheader,nounits"],
                                     capture_output=True, text=True, timeout=10).stdout
            except (OSError, subprocess.TimeoutExpired):
                return
            used = [int(v) for v in out.split() if v.isdigit()]
            if used:
                self.peak = max(self.peak or 0, max(used))


def run(args, gpus, zero):
    """One run -> its numbers; the trainer's output is kept in a log file beside OUT."""
    with tempfile.TemporaryDirectory(prefix="scaling-") as tmp:
        command = train_command(args, gpus, zero, Path(tmp) / "run")
        print(f"{PROG}: {gpus} GPU{'s' if gpus > 1 else ''}, zero {zero}: "
              f"{shlex.join(command)}", flush=True)
        with MemoryWatch(args.device == "cuda") as memory:
            result = subprocess.run(command, capture_output=True, text=True)
        log = args.out.with_name(f"{args.out.stem}-{gpus}-zero{zero}.log")
        log.write_text(result.stdout + result.stderr)
        if result.returncode != 0:
            sys.exit(f"{PROG}: the run failed (status {result.returncode}); its output is in {log}")
        records = [json.loads(line) for line in
                   (Path(tmp) / "run" / "metrics.jsonl").read_text().splitlines()]
    last = records[-1]
    return {"gpus": gpus, "zero": zero, "command": shlex.join(command),
            "tokens_per_s": last["tokens_per_s"], "steps_timed": args.log_every,
            "peak_mib": memory.peak, "log": log.name}


def machine():
    """The GPUs, the driver and the versions, one line each."""
    lines = [f"python {platform.python_version()}"]
    for package in ("numpy", "numba", "numba-cuda", "cupy-cuda13x", "cupy-cuda12x", "mpi4py"):
        try:
            lines.append(f"{package} {metadata.version(package)}")
        except metadata.PackageNotFoundError:
            pass
    try:
        from cupy.cuda import nccl
        version = nccl.get_version()
        lines.append(f"NCCL {version // 10000}.{version // 100 % 100}.{version % 100}")
    except ImportError:
        pass
    try:
        from mpi4py import MPI
        lines.append(" ".join(MPI.Get_library_version().splitlines()[0].split()))
    except ImportError:
        pass
    try:
        gpus = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version",
                               "--format=csv,noheader"], capture_output=True, text=True,
                              timeout=30).stdout.splitlines()
        if gpus:
            lines.insert(0, f"{len(gpus)} x {gpus[0]} (name, driver)")
    except (OSError, subprocess.TimeoutExpired):
        lines.insert(0, f"no GPU: {platform.processor() or platform.machine()}")
    nvls = os.environ.get("NCCL_NVLS_ENABLE")
    lines.append(f"NCCL_NVLS_ENABLE={nvls}" if nvls is not None else "NCCL_NVLS_ENABLE unset")
    return lines


def report(args, results):
    """-> the markdown report of results (a list of run()'s dicts)."""
    base = next((r for r in results if r["gpus"] == 1), None)
    plain = {r["gpus"]: r for r in results if r["zero"] == 0}
    rows = ["| GPUs | zero | tokens/s | scaling | vs plain | peak memory a GPU | vs plain |",
            "|---:|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        same = plain.get(r["gpus"])
        ratio = (lambda key: f"{r[key] / same[key]:.3f}"
                 if same is not None and same is not r and r[key] and same[key] else "-")
        scaling = f"**{r['tokens_per_s'] / base['tokens_per_s']:.2f}**" if base else "-"
        memory = f"{r['peak_mib'] / 1024:.1f} GiB" if r["peak_mib"] else "-"
        rows.append(f"| {r['gpus']} | {r['zero']} | {r['tokens_per_s']:,.0f} | {scaling} | "
                    f"{ratio('tokens_per_s')} | {memory} | {ratio('peak_mib')} |")
    model = ", ".join(f"{k} {v}" for k, v in (("n_layer", args.layers), ("d_model", args.d_model),
                                              ("n_head", args.heads)) if v is not None)
    lines = [f"# Data-parallel scaling, {datetime.date.today().isoformat()}", "",
             f"{args.config}{' (' + model + ')' if model else ''}, vocab {args.vocab_size}, "
             f"{args.batch_per_gpu} sequences a GPU, on {args.device}; tokens/s over the last "
             f"{args.log_every} of {args.steps} steps (the trainer's), peak memory as "
             "nvidia-smi saw it on the busiest GPU.", "",
             f"`python tools/scaling.py {shlex.join(sys.argv[1:])}`", "", *rows, "",
             "Machine and versions: " + "; ".join(machine()) + ".", "", "Commands:", ""]
    lines += [f"- `{r['command']}` (output: {r['log']})" for r in results]
    return "\n".join(lines) + "\n"


def main(argv=None):
    args = parse_args(argv)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    results = [run(args, gpus, zero) for gpus in args.gpus
               for zero in ([0] if gpus == 1 else args.zero)]
    args.out.write_text(report(args, results))
    args.out.with_suffix(".json").write_text(json.dumps(results, indent=1) + "\n")
    print(args.out.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
