"""The ways an ordered split-K (--deterministic's weight gradients) can run, on a config's
ordered products: in turns (the "ordered" epilogue) or by parts (the "parts" epilogue
into a workspace, then gemm.turns.add_parts), on tuning.ordered_tile's tile or the atomic
default's (tuning.default_tile's) or another persistent tile, in the tile's default
splits or twice or half as many. Each captured (20 launches a CUDA graph, the best of
REPS replays), after two runs from the same zeroed out checked for the same bits and
against torch.mm in float32 (TF32 off) of the same bf16 operands. Stops trying new ways
after DEADLINE seconds (kernels compile on a fresh machine).

    python3 ordered_sweep.py CONFIG:VOCAB...
"""
import os
import sys
import time
from unittest import mock

import numpy as np
from numba import cuda

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "tools"))
from benchmarks.gemm_operands import as_float, operands  # noqa: E402
from benchmarks.timing import captured_time  # noqa: E402

from microgpt.cuda_backend import CudaBackend  # noqa: E402
from microgpt.gemms import step_products  # noqa: E402
from microgpt.kernels import cache  # noqa: E402
from microgpt.kernels.gemm import bf16 as gemm_bf16, tuning  # noqa: E402
from microgpt.kernels.gemm.persistent import folds  # noqa: E402

GEOMETRY = {"andrea-120m": (16, 1024, 768, 12), "andrea-12m": (64, 256, 384, 6)}  # B T C layers
REPS = int(os.environ.get("REPS", "5"))
DEADLINE = time.perf_counter() + float(os.environ.get("DEADLINE", "60"))
TILES = {"ping-pong": tuning.PINGPONG_TILE, "copier": tuning.COPIER_TILE,
         "narrow": tuning.NARROW_COPIER_TILE}


def ways(M, N, K):
    """[(label, tile or None, split_k or None, deterministic, by parts, summed)] of a
    product; summed: a way whose step's sum the summary prints."""
    atomics = tuning.default_tile(M, N, K, True, True, False, True)
    name = {tile: n for n, tile in TILES.items()}
    found = [("atomic (the default)", None, None, False, False, True),
             ("turns, routed", None, None, True, False, True),
             ("parts, routed tile", None, None, True, True, True)]
    split = tuning.default_split_k(M, N, K, atomics)
    for s in sorted({split, 2 * split, max(1, split // 2)}):
        found.append((f"parts, atomics' tile ({name[atomics]}) split {s}", atomics, s,
                      True, True, s == split))
    for n, tile in TILES.items():
        if tile != atomics:
            found.append((f"parts, {n} split {tuning.default_split_k(M, N, K, tile)}", tile,
                          None, True, True, False))
    return found


def main(specs):
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False
    ops = CudaBackend()
    gen = torch.Generator(device="cuda").manual_seed(0)
    totals = {}
    for spec in specs:
        config, vocab = spec.split(":")
        B, T, C, layers = GEOMETRY[config]
        print(f"{config} vocab {vocab}: ordered products, ms captured (routed: "
              "tuning.ordered_tile and its default splits)", flush=True)
        for name, M, N, K, ta, tb, epilogue in step_products(B, T, C, int(vocab)):
            if epilogue != "accumulate":
                continue
            da, db, out, lhs, rhs = operands(M, N, K, ta, tb, epilogue, gen)
            ref = torch.mm(lhs.float(), rhs.float())
            print(f"{name} {M} x {N} x {K}: routed {tuning.ordered_tile(M, N, K)}", flush=True)
            for label, tile, split_k, deterministic, by_parts, summed in ways(M, N, K):
                if time.perf_counter() > DEADLINE:
                    print("  (deadline: the rest not tried)", flush=True)
                    return totals
                if tile is not None and split_k and -(-K // split_k) > tuning.MAX_CHAIN \
                        and not folds(tile):
                    continue

                def launch(stream=0):
                    with mock.patch.object(tuning, "ordered_by_parts",
                                           lambda *args: by_parts):
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
                        same = np.array_equal(runs[0].view(np.uint32),
                                              runs[1].view(np.uint32))
                        err = float(torch.linalg.norm(as_float(out) - ref)
                                    / torch.linalg.norm(ref))
                        note = f"same bits {same}, rel err {err:.1e}" + (
                            "" if same and err < 1e-5 else " FAILED")
                    ms = captured_time(launch, REPS, ops)
                    if summed:          # a step's: each layer's product, the LM head's once
                        way = label.split(" (")[0]
                        totals.setdefault((config, way), []).append(
                            ms * (1 if "LM head" in name else layers))
                    print(f"  {label}: {ms:.4f} ms  {note}", flush=True)
                except Exception as e:
                    print(f"  {label}: {type(e).__name__}: {str(e).splitlines()[0][:150]}",
                          flush=True)
    return totals


if __name__ == "__main__":
    if os.environ.get("MICROGPT_CACHE_DIR"):
        cache.use(os.environ["MICROGPT_CACHE_DIR"])
    for (config, way), times in main(sys.argv[1:]).items():
        print(f"{config} {way}: {sum(times):.4f} ms a step over {len(times)} products")
