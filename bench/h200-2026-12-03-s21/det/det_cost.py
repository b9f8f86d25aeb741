"""--deterministic's cost (issue 31's target: a step at most 3% slower) with session 21's
routing: the captured bf16 step on the default backend, on a deterministic one
(its ordered split-K on the persistent kernel: tuning.ordered_tile), and on a
deterministic one built with session 20's routing (the ordered split-K on the wgmma
kernel's tiles, tuning.default_tile's), on batches of a token shard (or uniform / zipf
tokens: session 20's batches.py), the steps cycling through 4 of them; the rounds
alternate, each figure the best round's.

    python3 det_cost.py CONFIG B T REPS ROUNDS VOCAB TOKENS
"""
import os
import sys
import time
from unittest import mock

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "h200-2026-12-03-s20", "det"))
from batches import batches, describe  # noqa: E402

from microgpt import GPT, get_config  # noqa: E402
from microgpt.cuda_backend import CudaBackend  # noqa: E402
from microgpt.data import default_cache_dir  # noqa: E402
from microgpt.kernels import cache as kernel_cache  # noqa: E402
from microgpt.kernels.gemm import tuning  # noqa: E402
from microgpt.optim import AdamW, AdamWConfig  # noqa: E402
from microgpt.step import Step  # noqa: E402

CONFIG, B, T, REPS, ROUNDS, VOCAB = (sys.argv[1], *map(int, sys.argv[2:7]))
TOKENS = sys.argv[7]
# name -> (deterministic, the ordered split-K's tiles: the launcher's, or the wgmma kernel's)
VARIANTS = {"default": (False, tuning.ordered_tile),
            "deterministic": (True, tuning.ordered_tile),
            "deterministic, s20's routing (wgmma ordered)": (
                True, lambda M, N, K: tuning.default_tile(M, N, K, True, True))}
kernel_cache.use(default_cache_dir() / "kernels")


def build(name, data):
    """The variant's step, compiled and captured (the graph keeps the kernels the routing
    chose while it was captured)."""
    t0 = time.perf_counter()
    deterministic, ordered_tile = VARIANTS[name]
    with mock.patch.object(tuning, "ordered_tile", ordered_tile):
        model = GPT(get_config(CONFIG, vocab_size=VOCAB),
                    backend=CudaBackend(deterministic=deterministic), precision="bf16")
        step = Step(model, AdamW(model, AdamWConfig(total_steps=10**6)), B, T)
        for batch in data[:2]:          # compile, then capture
            step.run(*batch)
        step.metrics()
    print(f"{name}: built, compiled and captured in {time.perf_counter() - t0:.1f} s",
          flush=True)
    return step


def seconds(step, data, reps):
    step.run(*data[-1])
    step.metrics()
    t0 = time.perf_counter()
    for i in range(reps):
        step.run(*data[i % len(data)])
    step.metrics()
    return (time.perf_counter() - t0) / reps


data = batches(TOKENS, VOCAB, 4, B, T)
print(f"tokens {TOKENS}, vocab {VOCAB}: " + "; ".join(describe(x) for x, _ in data),
      flush=True)
steps = {name: build(name, data) for name in VARIANTS}
best = {name: np.inf for name in steps}
for _ in range(ROUNDS):
    for name, step in steps.items():
        best[name] = min(best[name], seconds(step, data, REPS))
print(f"{CONFIG} vocab {VOCAB}, B {B} x {T}, bf16 captured, {TOKENS} tokens "
      f"({ROUNDS} rounds of {REPS}):", flush=True)
for name, seconds_a_step in best.items():
    print(f"  {name}: {seconds_a_step * 1e3:.2f} ms, "
          f"{100 * (seconds_a_step / best['default'] - 1):+.1f}%", flush=True)
