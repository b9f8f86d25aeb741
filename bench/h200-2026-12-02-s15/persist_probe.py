"""Captured timings (ms a launch) of the default tile, the persistent tile and the
clustered one (each with the launcher's split of K), beside torch.mm (eager), for every
product of the step: python persist_probe.py REPS [config ...]"""
import sys
import ml_dtypes
import numpy as np
sys.path.insert(0, "tools")
from microgpt.kernels import cache
cache.use("/tmp/tk")
import torch
from numba import cuda
from benchmarks.gemm import GEMM_CONFIGS
from benchmarks.timing import captured_time, torch_time
from microgpt.cuda_backend import CudaBackend
from microgpt.gemms import step_products
from microgpt.kernels.gemm import bf16 as gemm_bf16, tuning
from microgpt.kernels.gemm.tiles import PersistentTile

reps = int(sys.argv[1])
configs = sys.argv[2:] or [c[0] for c in GEMM_CONFIGS]
ops = CudaBackend()
rng = np.random.default_rng(0)
tiles = [("default", None), ("persistent", tuning.PERSISTENT_TILE),
         ("persistent-192", PersistentTile(128, 192, 64, 4, 2))]
print("config product MxNxK | " + " ".join(n for n, _ in tiles) + " torch | ratios vs torch")
log = {}
for config, B, T, C, V in GEMM_CONFIGS:
    if config not in configs:
        continue
    for name, M, N, K, ta, tb, epilogue in step_products(B, T, C, V):
        accumulate = epilogue == "accumulate"
        a = rng.standard_normal((K, M) if ta else (M, K), np.float32)
        b = rng.standard_normal((N, K) if tb else (K, N), np.float32)
        da = cuda.to_device(a.astype(ml_dtypes.bfloat16).view(np.uint16))
        db = cuda.to_device(b.astype(ml_dtypes.bfloat16).view(np.uint16))
        bf16_out = epilogue not in ("float32", "accumulate")
        out = cuda.to_device(np.zeros((M, N), np.uint16 if bf16_out else np.float32))
        ms = []
        for label, tile in tiles:
            try:
                ms.append(captured_time(lambda s: gemm_bf16.matmul_bf16(
                    out, da, db, ta, tb, accumulate, tile=tile, stream=s), reps, ops))
            except Exception as e:                      # noqa: BLE001
                print(f"  {label} failed: {type(e).__name__}: {str(e)[:200]}", flush=True)
                ms.append(float("nan"))
        ta_t, tb_t = torch.from_numpy(a).cuda().bfloat16(), torch.from_numpy(b).cuda().bfloat16()
        lhs, rhs = (ta_t.T if ta else ta_t), (tb_t.T if tb else tb_t)
        t_ms = torch_time(lambda: torch.mm(lhs, rhs), reps)
        print(f"{config} {name:16s} {M}x{N}x{K} | " + " ".join(f"{m:.4f}" for m in ms)
              + f" {t_ms:.4f} | " + " ".join(f"{t_ms / m:.3f}" for m in ms), flush=True)
        del da, db, out
from microgpt.kernels.gemm import persistent
print("clusters the device holds at once:", sorted({v[1] for v in persistent._compiled.values()}))
