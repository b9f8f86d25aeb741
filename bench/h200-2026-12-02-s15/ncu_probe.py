"""Launch a few step products once each with a named tile (config:name:tile, tile one of
default, persistent, cluster, p192, torch), for ncu."""
import sys
import ml_dtypes
import numpy as np
import torch
from numba import cuda
from microgpt.kernels import cache
from microgpt.gemms import step_products
from microgpt.kernels.gemm import bf16 as gemm_bf16, tuning
from microgpt.kernels.gemm.tiles import PersistentTile

cache.use("/tmp/tk")
CONFIGS = {"andrea-120m": (16, 1024, 768, 50304), "andrea-12m": (64, 256, 384, 4096)}
TILES = {"default": None, "persistent": tuning.PERSISTENT_TILE, "cluster": tuning.CLUSTER_TILE,
         "p192": PersistentTile(128, 192, 64, 4, 2)}
rng = np.random.default_rng(0)
for want in sys.argv[1:]:
    config, name, tile = want.split(":")
    for pname, M, N, K, ta, tb, epilogue in step_products(*CONFIGS[config]):
        if pname != name:
            continue
        accumulate = epilogue == "accumulate"
        bf16_out = epilogue not in ("accumulate", "float32")
        a = rng.standard_normal((K, M) if ta else (M, K), np.float32)
        b = rng.standard_normal((N, K) if tb else (K, N), np.float32)
        print(f"{want}: {M}x{N}x{K} ta={ta} tb={tb} {epilogue}", flush=True)
        if tile == "torch":
            ta_t = torch.from_numpy(a).cuda().bfloat16()
            tb_t = torch.from_numpy(b).cuda().bfloat16()
            torch.mm(ta_t.T if ta else ta_t, tb_t.T if tb else tb_t)
            torch.cuda.synchronize()
            continue
        da = cuda.to_device(a.astype(ml_dtypes.bfloat16).view(np.uint16))
        db = cuda.to_device(b.astype(ml_dtypes.bfloat16).view(np.uint16))
        out = cuda.to_device(np.zeros((M, N), np.uint16 if bf16_out else np.float32))
        gemm_bf16.matmul_bf16(out, da, db, ta, tb, accumulate, tile=TILES[tile])
        cuda.synchronize()
