"""Where --deterministic's cost lies: every op of one bf16 step timed on the device
(tools/profile_step.py's events between ops, run behind a spin kernel), on the default
backend and on deterministic ones, on batches of a token shard: the ordered split-K in
turns (the "ordered" epilogue, session 21's) and as routed (tuning.ordered_by_parts: by
parts where a tile's splits fill one wave); each op and operands' best of ROUNDS steps,
side by side, the largest differences from the default first; and each backend's
captured step (the best of ROUNDS rounds of 10).

    python3 det_profile.py CONFIG B T VOCAB ROUNDS TOKENS
"""
import os
import sys
import time
from unittest import mock

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "h200-2026-12-03-s20", "det"))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "tools"))
from batches import batches  # noqa: E402
from profile_step import behind_spin, group, instrumented, op_times  # noqa: E402

from microgpt import GPT, get_config  # noqa: E402
from microgpt.cuda_backend import CudaBackend  # noqa: E402
from microgpt.data import default_cache_dir  # noqa: E402
from microgpt.kernels import cache as kernel_cache  # noqa: E402
from microgpt.kernels.gemm import tuning  # noqa: E402
from microgpt.optim import AdamW, AdamWConfig  # noqa: E402
from microgpt.step import Step  # noqa: E402

CONFIG, B, T, VOCAB, ROUNDS = sys.argv[1], *map(int, sys.argv[2:6])
TOKENS = sys.argv[6]
kernel_cache.use(default_cache_dir() / "kernels")


def profile(deterministic, by_parts, data):
    with mock.patch.object(tuning, "ordered_by_parts", by_parts):
        return profiled(deterministic, data)


def profiled(deterministic, data):
    model = GPT(get_config(CONFIG, vocab_size=VOCAB),
                backend=CudaBackend(deterministic=deterministic), precision="bf16")
    step = Step(model, AdamW(model, AdamWConfig(total_steps=10**6)), B, T)
    for batch in data[:2]:              # compile, then capture
        step.run(*batch)
    step.metrics()
    graph = np.inf
    for _ in range(ROUNDS):
        t0 = time.perf_counter()
        for i in range(10):
            step.run(*data[i % len(data)])
        step.metrics()
        graph = min(graph, (time.perf_counter() - t0) / 10 * 1e3)
    step.graph = False
    best, calls = {}, {}
    for r in range(ROUNDS):
        with instrumented(model.backend) as marks:
            end = behind_spin(model.backend, marks, lambda: step.run(*data[r % len(data)]),
                              step.metrics)
        totals, counts, _ = group(op_times(marks, end))
        for label, ms in totals.items():
            best[label] = min(best.get(label, np.inf), ms)
        calls = counts
    return graph, best, calls


data = batches(TOKENS, VOCAB, 4, B, T)
VARIANTS = {"default": (False, tuning.ordered_by_parts),
            "turns": (True, lambda *args: False),
            "routed": (True, tuning.ordered_by_parts)}
runs = {name: profile(*how, data) for name, how in VARIANTS.items()}
g0, d0, c0 = runs["default"]
print(f"{CONFIG} vocab {VOCAB}, B {B} x {T}, bf16, {TOKENS} tokens, best of {ROUNDS}")
for name, (g, d, _) in runs.items():
    print(f"{name}: captured step {g:.3f} ms ({100 * (g / g0 - 1):+.1f}%), "
          f"sum of the ops {sum(d.values()):.3f} ms")
names = list(runs)
print("\n| op and operands | calls | " + " | ".join(f"{n} ms" for n in names) + " |")
print("|---|---:|" + "---:|" * len(names))
labels = sorted(set().union(*(d for _, d, _ in runs.values())),
                key=lambda k: -max(abs(d.get(k, 0) - d0.get(k, 0)) for _, d, _ in runs.values()))
for label in labels:
    calls = next(c[label] for _, _, c in runs.values() if label in c)
    print(f"| `{label}` | {calls} | " + " | ".join(
        f"{runs[n][1].get(label, 0.0):.4f}" for n in names) + " |")
