"""The bf16 step's tokens/s and device memory at the bench's geometries, one process, one
JSON line a geometry and mode on stdout (tools/bench.py's measurement: the device's free
memory before the model less that after its captured step has run; the median of --reps
replays). Modes: microgpt.model.RECOMPUTE on ("recomputed") and off ("kept"), each
geometry's in turn; on main's tree before it (PYTHONPATH=main_tree), --modes main.

    python ab.py --label mem --geometries andrea-120m gpt2-medium gpt2-xl:recomputed
"""
import argparse
import gc
import json
import time

import numpy as np
from numba import cuda

from microgpt import GPT, get_config, model as model_module
from microgpt.cuda_backend import CudaBackend
from microgpt.optim import AdamW, AdamWConfig
from microgpt.step import Step

# tools/benchmarks/steps.py's
GEOMETRIES = {
    "andrea-12m": ("andrea-12m", {}, 64, 256),
    "andrea-120m": ("andrea-120m", {}, 16, 1024),
    "gpt2-medium": ("andrea-120m", dict(n_layer=24, d_model=1024, n_head=16), 16, 1024),
    "gpt2-xl": ("andrea-120m", dict(n_layer=48, d_model=1600, n_head=25), 8, 1024),
}


def run(label, geometry, reps, mode):
    name, overrides, B, T = GEOMETRIES[geometry]
    cfg = get_config(name, **overrides)
    rng = np.random.default_rng(0)
    idx, targets = (rng.integers(0, cfg.vocab_size, (B, T)).astype(np.int32)
                    for _ in range(2))
    if mode != "main":
        model_module.RECOMPUTE = mode == "recomputed"
    context = cuda.current_context()
    t0 = time.perf_counter()
    free_before, _ = context.get_memory_info()
    model = GPT(cfg, backend=CudaBackend(), precision="bf16")      # seed 0: the same weights
    step = Step(model, AdamW(model, AdamWConfig(total_steps=10**6)), B, T)
    for _ in range(3):              # compile, capture, one replay
        step.run(idx, targets)
    losses = [float(v) for v in step.metrics()["loss"]]
    setup = time.perf_counter() - t0
    times = []
    for _ in range(reps):
        model.backend.synchronize()
        t0 = time.perf_counter()
        step.run(idx, targets)
        model.backend.synchronize()
        times.append(time.perf_counter() - t0)
    step.metrics()
    free_after, _ = context.get_memory_info()
    print(json.dumps(dict(label=label, mode=mode, geometry=geometry, B=B, T=T, losses=losses,
                          ms_median=1e3 * float(np.median(times)), ms_min=1e3 * min(times),
                          tok_s=B * T / float(np.median(times)),
                          gib=(free_before - free_after) / 2**30, setup_s=setup)), flush=True)
    del model, step             # freed before the next run's allocations
    gc.collect()
    context.deallocations.clear()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--label", required=True)
    parser.add_argument("--geometries", nargs="+", default=list(GEOMETRIES),
                        help="GEOMETRY or GEOMETRY:MODE,MODE (that geometry's modes only)")
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--modes", nargs="+", default=["recomputed", "kept"])
    args = parser.parse_args()
    for item in args.geometries:
        geometry, _, modes = item.partition(":")
        for mode in modes.split(",") if modes else args.modes:
            run(args.label, geometry, args.reps, mode)


if __name__ == "__main__":
    main()
