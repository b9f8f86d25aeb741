"""The weight gradients' split-K on the H200, three ways: the parts added by float atomics
(the default), added in the order of the splits (deterministic, gemm.turns), and unsplit
(session 16's --deterministic: one block per tile along all of K). Each product of an
andrea-120m step (B 16 x 1024) whose out takes split-K, 20 launches captured in a graph,
the best of 3 replays, ms a launch; and whether the ordered runs' bits repeat.

    python3 gemm_order.py [MODES] [PRODUCTS]   # e.g. atomic,ordered "W_O dW,LM head dW"
"""
import sys
import time

import numpy as np
from numba import cuda

from microgpt.cuda_backend import CudaBackend
from microgpt.data import default_cache_dir
from microgpt.kernels import cache as kernel_cache
from microgpt.gemms import step_products
from microgpt.kernels.gemm import bf16 as gemm_bf16

REPS = 20
kernel_cache.use(default_cache_dir() / "kernels")
backend = CudaBackend()
rng = np.random.default_rng(0)


def bf16_device(shape):
    bits = (rng.standard_normal(shape, np.float32).view(np.uint32) >> 16).astype(np.uint16)
    return cuda.to_device(bits)


def time_launches(launch):
    launch()
    backend.synchronize()
    graph = backend.capture(lambda: [launch() for _ in range(REPS)])
    best = np.inf
    for _ in range(3):
        backend.synchronize()
        t0 = time.perf_counter()
        graph.replay()
        backend.synchronize()
        best = min(best, (time.perf_counter() - t0) / REPS)
    return best * 1e3


MODES = {"atomic": {}, "ordered": {"deterministic": True}, "unsplit": {"split_k": 1}}
modes = sys.argv[1].split(",") if len(sys.argv) > 1 else list(MODES)
names = sys.argv[2].split(",") if len(sys.argv) > 2 else None
products = [p for p in step_products(16, 1024, 768, 50304) + step_products(16, 1024, 768, 4096)
            if (p[0].endswith("dW") or p[0] == "LM head dX")]
if names:
    products = sorted((p for p in products if p[0] in names), key=lambda p: names.index(p[0]))
seen = set()
print("| product | M x N x K | " + " | ".join(f"{m} ms" for m in modes)
      + " | ordered / atomic | same bits |")
print("|---|---|" + "---:|" * (len(modes) + 1) + "---|")
for name, M, N, K, ta, tb, epilogue in products:
    if (M, N, K) in seen:
        continue
    seen.add((M, N, K))
    accumulate = epilogue == "accumulate"
    a = bf16_device((K, M) if ta else (M, K))
    b = bf16_device((N, K) if tb else (K, N))
    out = cuda.device_array((M, N), np.float32)
    out0 = rng.standard_normal((M, N), np.float32)
    ms = {}
    for mode in modes:
        def launch(kwargs=MODES[mode]):
            gemm_bf16.matmul_bf16(out, a, b, ta, tb, accumulate, stream=backend.stream,
                                  **kwargs)
        ms[mode] = time_launches(launch)
    bits = []
    for _ in range(3):
        out.copy_to_device(out0, stream=backend.stream)
        gemm_bf16.matmul_bf16(out, a, b, ta, tb, accumulate, deterministic=True,
                              stream=backend.stream)
        bits.append(backend.to_host(out).view(np.uint32))
    same = all((x == bits[0]).all() for x in bits)
    ratio = ms["ordered"] / ms["atomic"] if {"ordered", "atomic"} <= set(ms) else float("nan")
    print(f"| {name} | {M} x {N} x {K} | " + " | ".join(f"{ms[m]:.4f}" for m in modes)
          + f" | {ratio:.3f} | {same} |", flush=True)
