#!/usr/bin/env python3
"""How long the trainer takes from its process's start to its first step's log line.

    python tools/startup_time.py --runs cold warm --out bench/startup.md -- \\
        --config andrea-120m --steps 3 --data corpus.txt --tokenizer bytes --cache-dir DIR

Each run starts `python -m microgpt.train` with the arguments after `--` and stamps every
line it prints on arrival; a "fresh" run first removes the whole cache directory (the
very first run on a machine: it tokenizes, records its step and compiles its kernels
ahead), a "cold" run the compiled kernels and the manifests (DIR/kernels: the tokens stay
cached), an "ahead" run the compiled kernels but not the manifests of the shapes run
before (what an edited kernel source or a numba upgrade leaves: the trainer compiles the
listed kernels ahead, a process per CPU), a "warm" run keeps them all. At the first
step's line the run is killed (nothing after it is measured: no evaluation, no
checkpoint), and the report gives the seconds to that line, to the compile-ahead's start
and end (its "compiling N kernels" and "compiled ahead" lines), to the kernels' summary,
and that summary. A run that ends before its first step prints its output and exits with
its status.
"""
import argparse
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

FIRST_STEP = re.compile(r"^step +1/")


def one_run(train_args, label):
    """-> {run, seconds to the first step, seconds to the kernels' summary, summary}."""
    started = time.perf_counter()
    process = subprocess.Popen([sys.executable, "-u", "-m", "microgpt.train", *train_args],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    for line in process.stdout:
        lines.append((time.perf_counter() - started, line.rstrip("\n")))
        if FIRST_STEP.match(line):
            process.send_signal(signal.SIGKILL)
            break
    process.wait()
    first = [t for t, line in lines if FIRST_STEP.match(line)]
    if not first:
        sys.stdout.write("".join(f"{t:8.2f}  {line}\n" for t, line in lines))
        sys.exit(f"startup_time: the {label} run ended (status {process.returncode}) before "
                 "its first step")

    def stamp(pattern):
        found = [(t, line) for t, line in lines if re.match(pattern, line)]
        return found[-1] if found else (None, "")
    for t, line in lines:
        print(f"{label:>5} {t:8.2f}  {line}", flush=True)
    kernels_at, kernels = stamp(r"kernels: \d+ ready")
    return {"run": label, "first_step": first[0], "kernels_at": kernels_at, "kernels": kernels,
            "ahead_from": stamp(r"kernels: compiling \d+ kernels")[0],
            "ahead_to": stamp(r"kernels: \d+ compiled ahead")[0]}


def cache_dir(train_args):
    """The --cache-dir the trainer will use (its default otherwise)."""
    if "--cache-dir" in train_args:
        return Path(train_args[train_args.index("--cache-dir") + 1])
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from microgpt.data import default_cache_dir
    return default_cache_dir()


def versions():
    import llvmlite
    import numba
    import numba_cuda
    import numpy
    try:
        from numba import cuda
        gpu = cuda.get_current_device().name
        gpu = gpu.decode() if isinstance(gpu, bytes) else gpu
    except Exception as error:         # no GPU: say so in the report, measure anyway
        gpu = f"no GPU ({type(error).__name__})"
    return (f"{gpu}; {os.cpu_count()} CPUs; Python {platform.python_version()}, numpy "
            f"{numpy.__version__}, numba {numba.__version__}, numba-cuda "
            f"{numba_cuda.__version__}, llvmlite {llvmlite.__version__}")


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    own, train_args = (argv[:argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv \
        else (argv, [])
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", nargs="+", choices=("fresh", "cold", "ahead", "warm"),
                   default=["cold", "warm"], help="the runs, in order (default: cold warm)")
    p.add_argument("--out", type=Path, help="append the report (markdown) to this file")
    p.add_argument("--title", default="", help="the report's heading")
    args = p.parse_args(own)
    kernels = cache_dir(train_args) / "kernels"
    results = []
    for label in args.runs:
        if label == "fresh":
            shutil.rmtree(kernels.parent, ignore_errors=True)
        elif label == "cold":
            shutil.rmtree(kernels, ignore_errors=True)
        elif label == "ahead":
            for entry in kernels.glob("*"):
                if entry.name != "manifests":
                    shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
        results.append(one_run(train_args, label))
    command = " ".join(["python tools/startup_time.py --runs", *args.runs, "--", *train_args])
    report = [f"### {args.title or 'start-up'}", "", f"`{command}`", "", versions(), "",
              "| run | to the first step's line (s) | waiting for the compilers (s) | "
              "to the kernels' summary (s) | kernels |",
              "|---|--:|--:|--:|---|"]

    def seconds(t):
        return "" if t is None else f"{t:.2f}"

    def span(r):
        if r["ahead_from"] is None:
            return ""
        return f"{r['ahead_from']:.2f} - {seconds(r['ahead_to'])}"
    report += [f"| {r['run']} | {r['first_step']:.2f} | {span(r)} | "
               f"{seconds(r['kernels_at'])} | {r['kernels'].split('; the cache')[0]} |"
               for r in results]
    text = "\n".join(report) + "\n\n"
    print(text)
    if args.out:
        with open(args.out, "a") as f:
            f.write(text)


if __name__ == "__main__":
    main()
