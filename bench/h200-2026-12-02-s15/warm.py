"""Compile (into the kernel cache /tmp/tk) every kernel the probe launches: each step
product once with each tile, part `part` of `parts` of them: python warm.py PART PARTS"""
import sys
import numpy as np
from numba import cuda
from microgpt.kernels import cache
cache.use("/tmp/tk")
sys.path.insert(0, "tools")
from benchmarks.gemm import GEMM_CONFIGS
from microgpt.gemms import step_products
from microgpt.kernels.gemm import bf16 as gemm_bf16, tuning

from microgpt.kernels.gemm.tiles import PersistentTile
TILES = [None, tuning.PERSISTENT_TILE, PersistentTile(128, 192, 64, 4, 2)]
part, parts = int(sys.argv[1]), int(sys.argv[2])
jobs = [(c, p, t) for c in GEMM_CONFIGS for p in step_products(*c[1:]) for t in TILES]
seen = set()
for i, ((config, *_), (name, M, N, K, ta, tb, epilogue), tile) in enumerate(jobs):
    if i % parts != part:
        continue
    accumulate = epilogue == "accumulate"
    bf16_out = epilogue not in ("accumulate", "float32")
    a = cuda.device_array((K, M) if ta else (M, K), np.uint16)
    b = cuda.device_array((N, K) if tb else (K, N), np.uint16)
    out = cuda.device_array((M, N), np.uint16 if bf16_out else np.float32)
    try:
        gemm_bf16.matmul_bf16(out, a, b, ta, tb, accumulate, tile=tile)
        cuda.synchronize()
    except Exception as e:      # noqa: BLE001
        print(f"{config} {name} {tile}: {type(e).__name__}: {str(e)[:300]}", flush=True)
print(f"part {part} done", flush=True)
