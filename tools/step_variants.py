#!/usr/bin/env python3
"""The training step's variants against the plain step, in one run on one GPU: GPT-2's
biases (fused into the GEMMs' epilogues, their gradients as column sums) and gradient
accumulation (micro-batches summed inside the captured step), each as tokens/s at
andrea-120m in bf16, captured, and as a ratio to the plain step's tokens/s.

    python tools/step_variants.py --out bench/STEP_VARIANTS.md [--reps 20] [--no-accum]

Issue 32's targets: the step with biases at 0.97x the plain step's tokens/s or more, and
--grad-accum 4 at B 16 at most 2% more time per token than B 16 alone (a ratio of 0.98 or
more). The variants alternate, three rounds each, so a drift of the machine's clocks
weighs on all of them alike; each figure is the best round's.
"""
import argparse
import platform
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import versions  # noqa: E402  (the benchmarks' header: machine and versions)

# (label, config overrides, micro-batches a step)
VARIANTS = [("plain, B 16", {}, 1),
            ("biases, B 16", dict(bias=True), 1),
            ("4 micro-batches of B 16", {}, 4)]
B, T, ROUNDS = 16, 1024, 3


def step_seconds(step, idx, targets, reps):
    """Seconds per step over reps captured replays, read back once at the end."""
    step.run(idx, targets)
    step.metrics()
    t0 = time.perf_counter()
    for _ in range(reps):
        step.run(idx, targets)
    step.metrics()                  # the one read back: waits for the device
    return (time.perf_counter() - t0) / reps


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True, help="the markdown file to write")
    p.add_argument("--reps", type=int, default=20, help="steps timed per round")
    p.add_argument("--no-accum", action="store_true",
                   help="the plain and biased steps alone (issue 32's bias target)")
    args = p.parse_args(argv)

    from microgpt import GPT, get_config
    from microgpt.optim import AdamW, AdamWConfig
    from microgpt.step import Step

    rng = np.random.default_rng(0)
    steps = []
    for label, overrides, accum in VARIANTS[:2] if args.no_accum else VARIANTS:
        started = time.perf_counter()
        cfg = get_config("andrea-120m", **overrides)
        model = GPT(cfg, backend="cuda", precision="bf16")
        step = Step(model, AdamW(model, AdamWConfig(total_steps=10**6)), B, T, accum=accum)
        idx, targets = (rng.integers(0, cfg.tokens, (accum * B, T)).astype(np.int32)
                        for _ in range(2))
        for _ in range(2):          # compile, then capture
            step.run(idx, targets)
        step.metrics()
        # as it goes, so that a run cut short still says how far it came
        print(f"{label}: built, compiled and captured in {time.perf_counter() - started:.1f} s",
              flush=True)
        steps.append((label, accum, step, idx, targets))
    best = {label: np.inf for label, *_ in steps}
    for _ in range(ROUNDS):
        for label, accum, step, idx, targets in steps:
            best[label] = min(best[label], step_seconds(step, idx, targets, args.reps) / accum)
    plain = best[VARIANTS[0][0]]
    lines = [
        "# The training step's variants: biases and gradient accumulation (issue 32)",
        "",
        f"Machine: {versions()}; {platform.node()}",
        f"Command: `python tools/step_variants.py --out {args.out} --reps {args.reps}"
        f"{' --no-accum' if args.no_accum else ''}`",
        "",
        f"andrea-120m, bf16, each step captured in a CUDA graph; {ROUNDS} rounds of "
        f"{args.reps} steps per variant, alternating, the best round's time per micro-batch "
        f"of {B} x {T} tokens.",
        "",
        "| variant | ms per micro-batch | tokens/s | against plain |",
        "|---|---:|---:|---:|",
    ]
    for label, *_ in steps:
        lines.append(f"| {label} | {best[label] * 1e3:.2f} | {B * T / best[label]:,.0f} | "
                     f"{plain / best[label]:.3f}x |")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
