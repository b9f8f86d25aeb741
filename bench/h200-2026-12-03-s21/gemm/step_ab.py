"""The captured bf16 step of andrea-120m (B 16, T 1024) with the GEMM routing's variants,
in one process: each variant's switches set while its step is built, compiled and
captured (the graph keeps the kernels it captured); the variants alternate, three rounds
of REPS steps each, the best round's.

python3 step_ab.py [REPS] [CONFIG]    (REPS 0: build, compile and capture only: fills the cache)
"""
import contextlib
import os
import sys
import time

import numpy as np

from microgpt import GPT, get_config
from microgpt.kernels import cache, gemm
from microgpt.optim import AdamW, AdamWConfig
from microgpt.step import Step

ROUNDS = 3
SHAPES = {"andrea-120m": (16, 1024), "andrea-12m": (64, 256)}


@contextlib.contextmanager
def switched(module, **values):
    before = {name: getattr(module, name) for name in values}
    for name, value in values.items():
        setattr(module, name, value)
    try:
        yield
    finally:
        for name, value in before.items():
            setattr(module, name, value)


VARIANTS = {"routed": lambda: switched(gemm),
            "GELU forward in the epilogue": lambda: switched(
                gemm, GELU_FORWARD_IN_EPILOGUE=True)}


def main(reps, config):
    if os.environ.get("MICROGPT_CACHE_DIR"):
        cache.use(os.environ["MICROGPT_CACHE_DIR"])
    B, T = SHAPES[config]
    rng = np.random.default_rng(0)
    cfg = get_config(config)
    idx, targets = (rng.integers(0, cfg.tokens, (B, T)).astype(np.int32) for _ in range(2))
    steps = {}
    for label, variant in VARIANTS.items():
        started = time.perf_counter()
        with variant():
            model = GPT(cfg, backend="cuda", precision="bf16")
            step = Step(model, AdamW(model, AdamWConfig(total_steps=10**6)), B, T)
            for _ in range(2):               # compile, then capture
                step.run(idx, targets)
            step.metrics()
        print(f"{config} {label}: built, compiled and captured in "
              f"{time.perf_counter() - started:.1f} s", flush=True)
        steps[label] = step
    best = dict.fromkeys(steps, np.inf)
    for _ in range(ROUNDS if reps else 0):
        for label, step in steps.items():
            step.run(idx, targets)
            step.metrics()
            t0 = time.perf_counter()
            for _ in range(reps):
                step.run(idx, targets)
            step.metrics()
            best[label] = min(best[label], (time.perf_counter() - t0) / reps)
    for label, seconds in best.items():
        if reps:
            print(f"{config} {label}: {seconds * 1e3:.2f} ms a step, "
                  f"{B * T / seconds:,.0f} tokens/s", flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 10,
         sys.argv[2] if len(sys.argv) > 2 else "andrea-120m")
