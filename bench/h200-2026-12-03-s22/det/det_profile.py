"""Where --deterministic's cost lies: every op of one bf16 step timed on the device
(tools/profile_step.py's events between ops, run behind a spin kernel), on the default
backend and on a deterministic one, on batches of a token shard; each op and operands'
best of ROUNDS steps, the two side by side, the largest differences first; and each
backend's captured step (the best of ROUNDS rounds of 10).

    python3 det_profile.py CONFIG B T VOCAB ROUNDS TOKENS
"""
import os
import sys
import time

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
from microgpt.optim import AdamW, AdamWConfig  # noqa: E402
from microgpt.step import Step  # noqa: E402

CONFIG, B, T, VOCAB, ROUNDS = sys.argv[1], *map(int, sys.argv[2:6])
TOKENS = sys.argv[6]
kernel_cache.use(default_cache_dir() / "kernels")


def profile(deterministic, data):
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
(g0, d0, c0), (g1, d1, c1) = profile(False, data), profile(True, data)
print(f"{CONFIG} vocab {VOCAB}, B {B} x {T}, bf16, {TOKENS} tokens, best of {ROUNDS}")
print(f"captured step: default {g0:.3f} ms, deterministic {g1:.3f} ms ({100 * (g1 / g0 - 1):+.1f}%)")
print(f"sum of the ops: default {sum(d0.values()):.3f} ms, deterministic {sum(d1.values()):.3f} ms")
print("\n| op and operands | calls | default ms | deterministic ms | difference |")
print("|---|---:|---:|---:|---:|")
labels = sorted(set(d0) | set(d1), key=lambda k: -abs(d1.get(k, 0) - d0.get(k, 0)))
for label in labels:
    a, b = d0.get(label, 0.0), d1.get(label, 0.0)
    print(f"| `{label}` | {c1.get(label, c0.get(label))} | {a:.4f} | {b:.4f} | {b - a:+.4f} |")
