"""--deterministic's cost at andrea-120m (issue 31's target: a step at most 3% slower):
microgpt's captured bf16 step (B 16 x 1024) on the default backend against a deterministic
one (the embedding's sorted backward, split-K's parts added in the order of the splits;
session 16's version of this script measured the GEMMs without split-K), at the default vocabulary
(50,304) and at the convergence runs' (4,096); the rounds alternate (a drift of the clocks
weighs on both alike), each figure the best round's.

    python3 det_cost.py [REPS] [ROUNDS] [VOCABS]   # REPS 1 ROUNDS 1: compile into the cache only
"""
import sys
import time

import numpy as np

from microgpt import GPT, get_config
from microgpt.cuda_backend import CudaBackend
from microgpt.data import default_cache_dir
from microgpt.kernels import cache as kernel_cache
from microgpt.optim import AdamW, AdamWConfig
from microgpt.step import Step

REPS = int(sys.argv[1]) if len(sys.argv) > 1 else 20
ROUNDS = int(sys.argv[2]) if len(sys.argv) > 2 else 3
B, T = 16, 1024
kernel_cache.use(default_cache_dir() / "kernels")
rng = np.random.default_rng(0)


def build(vocab, deterministic, precision="bf16"):
    t0 = time.perf_counter()
    cfg = get_config("andrea-120m", vocab_size=vocab)
    model = GPT(cfg, backend=CudaBackend(deterministic=deterministic), precision=precision)
    step = Step(model, AdamW(model, AdamWConfig(total_steps=10**6)), B, T)
    batch = [rng.integers(0, vocab, (B, T)).astype(np.int32) for _ in range(2)]
    for _ in range(2):          # compile, then capture
        step.run(*batch)
    step.metrics()
    print(f"vocab {vocab}, {precision}, deterministic {deterministic}: built, compiled and "
          f"captured in {time.perf_counter() - t0:.1f} s", flush=True)
    return step, batch


def seconds(step, batch, reps):
    step.run(*batch)
    step.metrics()
    t0 = time.perf_counter()
    for _ in range(reps):
        step.run(*batch)
    step.metrics()
    return (time.perf_counter() - t0) / reps


for vocab in map(int, sys.argv[3].split(",")) if len(sys.argv) > 3 else (4096, 50304):
    steps = {det: build(vocab, det) for det in (False, True)}
    best = {det: np.inf for det in steps}
    for _ in range(ROUNDS):
        for det, (step, batch) in steps.items():
            best[det] = min(best[det], seconds(step, batch, REPS))
    print(f"andrea-120m vocab {vocab}, B {B} x {T}, bf16 captured: default "
          f"{best[False] * 1e3:.2f} ms, deterministic {best[True] * 1e3:.2f} ms: "
          f"{100 * (best[True] / best[False] - 1):+.1f}% ({ROUNDS} rounds of {REPS})",
          flush=True)
    steps = best = None
