"""The splits and tiles an ordered split-K (--deterministic's weight gradients) can take,
on one config's ordered products, in turns (the "ordered" epilogue) and by parts (the
"parts" epilogue into a workspace, then gemm.turns.add_parts): each captured (20 launches a CUDA graph, the best of
REPS replays), after two runs from the same zeroed out checked for the same bits and
against torch.mm in float32 (TF32 off) of the same bf16 operands. "atomic" is the
default's product (the launcher's tile and splits, float atomics); split 1 owns its whole
K (a fold every FOLD_STEPS slabs past a chain: the narrow copier's, which can fold).
Stops trying new ways after DEADLINE seconds (kernels compile on a fresh machine).

    python3 ordered_sweep.py CONFIG VOCAB
"""
import os
import sys
import time
from unittest import mock

import numpy as np
from numba import cuda

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "h200-2026-12-03-s20", "gemm"))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "tools"))
from benchmarks.timing import captured_time  # noqa: E402
from probe import as_float, operands  # noqa: E402

from microgpt.cuda_backend import CudaBackend  # noqa: E402
from microgpt.gemms import step_products  # noqa: E402
from microgpt.kernels import cache  # noqa: E402
from microgpt.kernels.gemm import bf16 as gemm_bf16, tuning  # noqa: E402
from microgpt.kernels.gemm.persistent import folds  # noqa: E402

GEOMETRY = {"andrea-120m": (16, 1024, 768), "andrea-12m": (64, 256, 384)}   # B T C
REPS = int(os.environ.get("REPS", "5"))
DEADLINE = time.perf_counter() + float(os.environ.get("DEADLINE", "60"))
TILES = {"ping-pong": tuning.PINGPONG_TILE, "copier": tuning.COPIER_TILE,
         "narrow": tuning.NARROW_COPIER_TILE}
SPLITS = (None, 1, 2, 3, 4, 6, 8, 12, 16)


def main(config, vocab):
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False
    ops = CudaBackend()
    rng = np.random.default_rng(0)
    B, T, C = GEOMETRY[config]
    print(f"{config} vocab {vocab}: ordered products, ms captured (default splits: "
          "tuning.default_split_k's)", flush=True)
    for name, M, N, K, ta, tb, epilogue in step_products(B, T, C, vocab):
        if epilogue != "accumulate":
            continue
        da, db, out, lhs, rhs = operands(M, N, K, ta, tb, epilogue, rng)
        ref = torch.mm(lhs.float(), rhs.float())
        print(f"{name} {M} x {N} x {K}: routed {tuning.ordered_tile(M, N, K)}", flush=True)
        rows = [("atomic", None, None, False, False)] + [
            (t, tile, s, True, parts) for t, tile in TILES.items() for s in SPLITS
            for parts in (False, True)]
        for label, tile, split_k, deterministic, by_parts in rows:
            if time.perf_counter() > DEADLINE:
                print("  (deadline: the rest not tried)", flush=True)
                return
            if tile is not None:
                s = split_k or tuning.default_split_k(M, N, K, tile)
                if -(-K // s) > tuning.MAX_CHAIN and not folds(tile):
                    continue
                label = (f"{label} split {s}{'' if split_k else ' (default)'}"
                         f"{' parts' if by_parts else ' turns'}")
                if by_parts and s == 1:
                    continue

            def launch(stream=0):
                with mock.patch.object(tuning, "ordered_by_parts", lambda *args: by_parts):
                    gemm_bf16.matmul_bf16(out, da, db, ta, tb, True, tile=tile,
                                          split_k=split_k, deterministic=deterministic,
                                          stream=stream)
            try:
                note = ""
                if deterministic:
                    runs = []
                    for _ in range(2):
                        out.copy_to_device(np.zeros(out.shape, np.float32))
                        launch()
                        cuda.synchronize()
                        runs.append(out.copy_to_host())
                    same = np.array_equal(runs[0].view(np.uint32), runs[1].view(np.uint32))
                    err = float(torch.linalg.norm(as_float(out) - ref) / torch.linalg.norm(ref))
                    note = f"same bits {same}, rel err {err:.1e}" + (
                        "" if same and err < 1e-5 else " FAILED")
                ms = captured_time(launch, REPS, ops)
                print(f"  {label}: {ms:.4f} ms  {note}", flush=True)
            except Exception as e:
                print(f"  {label}: {type(e).__name__}: {str(e).splitlines()[0][:150]}",
                      flush=True)


if __name__ == "__main__":
    if os.environ.get("MICROGPT_CACHE_DIR"):
        cache.use(os.environ["MICROGPT_CACHE_DIR"])
    main(sys.argv[1], int(sys.argv[2]))
