"""The captured bf16 step of andrea-120m (B 16, T 1024) with the GEMM routing of session 20
(the persistent kernel's copier and ping-pong tiles) and without it (the wgmma tiles), in
one process: the variants alternate, three rounds of REPS steps each, the best round's.

python3 step_ab.py [REPS]    (REPS 0: build, compile and capture only: fills the cache)
"""
import os
import sys
import time

import numpy as np

from microgpt import GPT, get_config
from microgpt.kernels import cache
from microgpt.kernels.gemm import bf16 as gemm_bf16
from microgpt.optim import AdamW, AdamWConfig
from microgpt.step import Step

B, T, ROUNDS = 16, 1024, 3
routed = gemm_bf16.default_tile


def wgmma_tiles(M, N, K, accumulate, wgmma, bf16_out, persistent):
    return routed(M, N, K, accumulate, wgmma, bf16_out, False)


def main(reps):
    if os.environ.get("MICROGPT_CACHE_DIR"):
        cache.use(os.environ["MICROGPT_CACHE_DIR"])
    rng = np.random.default_rng(0)
    cfg = get_config("andrea-120m")
    idx, targets = (rng.integers(0, cfg.tokens, (B, T)).astype(np.int32) for _ in range(2))
    steps = {}
    for label, choose in (("routed", routed), ("wgmma tiles", wgmma_tiles)):
        started = time.perf_counter()
        gemm_bf16.default_tile = choose      # (the graph keeps the kernels captured)
        model = GPT(cfg, backend="cuda", precision="bf16")
        step = Step(model, AdamW(model, AdamWConfig(total_steps=10**6)), B, T)
        for _ in range(2):                   # compile, then capture
            step.run(idx, targets)
        step.metrics()
        print(f"{label}: built, compiled and captured in {time.perf_counter() - started:.1f} s",
              flush=True)
        steps[label] = step
    gemm_bf16.default_tile = routed
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
            print(f"{label}: {seconds * 1e3:.2f} ms a step, {B * T / seconds:,.0f} tokens/s",
                  flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 10)
