"""The bf16 step's tokens/s and device memory, variants of the head's chunking in one
process (tools/bench.py's measurement: the free memory before the model less that after
its captured step; the mean of --reps replays), one JSON line a run on stdout.

    python ab.py --label mem --rows 0 8192 4096     # rows 0: the whole batch in one chunk
    PYTHONPATH=main_tree python ab.py --label main  # the code before (no HEAD_ROWS)
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

GEOMETRIES = {"andrea-120m": ("andrea-120m", 16, 1024), "andrea-12m": ("andrea-12m", 64, 256)}


def run(label, name, B, T, reps):
    cfg = get_config(name, **({"vocab_size": 24} if name == "microgpt" else {}))
    rng = np.random.default_rng(0)
    idx, targets = (rng.integers(0, cfg.vocab_size, (B, T)).astype(np.int32)
                    for _ in range(2))
    free_before, _ = cuda.current_context().get_memory_info()
    model = GPT(cfg, backend=CudaBackend(), precision="bf16")
    step = Step(model, AdamW(model, AdamWConfig(total_steps=10**6)), B, T)
    for _ in range(3):              # compile, capture, one replay
        step.run(idx, targets)
    step.metrics()
    times = []
    for _ in range(reps):
        model.backend.synchronize()
        t0 = time.perf_counter()
        step.run(idx, targets)
        model.backend.synchronize()
        times.append(time.perf_counter() - t0)
    step.metrics()
    free_after, _ = cuda.current_context().get_memory_info()
    print(json.dumps(dict(label=label, config=name, B=B, T=T,
                          ms_median=1e3 * float(np.median(times)), ms_min=1e3 * min(times),
                          tok_s=B * T / float(np.median(times)),
                          gib=(free_before - free_after) / 2**30)), flush=True)
    del model, step             # freed before the next variant's allocations
    gc.collect()
    cuda.current_context().deallocations.clear()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--label", required=True)
    parser.add_argument("--rows", type=int, nargs="*", default=[None])
    parser.add_argument("--configs", nargs="+", default=list(GEOMETRIES))
    parser.add_argument("--reps", type=int, default=30)
    args = parser.parse_args()
    for config in args.configs:
        name, B, T = GEOMETRIES[config]
        for rows in args.rows:
            if rows is not None:
                model_module.HEAD_ROWS = rows or B * T
            label = args.label if rows is None else f"{args.label} HEAD_ROWS {rows or B * T}"
            run(label, name, B, T, args.reps)


if __name__ == "__main__":
    main()
