"""The ways an ordered split-K by parts (--deterministic's weight gradients where a
tile's splits fill one wave: tuning.ordered_tile) can run on a config's ordered
products, with session 24's add_parts: the routed tile in its default splits and in
fewer (down to the fewest whose chains fit, K / MAX_CHAIN), beside the atomics (the
default), the turns, the routed way with session 22's add_parts (routings.py), and by
parts on the atomics' tile where the routing takes the turns (andrea-120m's products of
several waves). Each
captured (20 launches a CUDA graph, the best of REPS replays), every deterministic way
first run twice from one zeroed out and checked for the same bits and against torch.mm
in float32 (TF32 off) of the same bf16 operands. Stops trying new ways after DEADLINE
seconds. (Session 22's script, its ways changed.)

    python3 ordered_sweep.py CONFIG:VOCAB...
"""
import contextlib
import os
import sys
import time
from unittest import mock

import numpy as np
from numba import cuda

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "tools"))
sys.path.insert(0, HERE)
from benchmarks.gemm_operands import as_float, operands  # noqa: E402
from benchmarks.timing import captured_time  # noqa: E402

from microgpt.cuda_backend import CudaBackend  # noqa: E402
from microgpt.gemms import step_products  # noqa: E402
from microgpt.kernels import cache  # noqa: E402
from microgpt.kernels.gemm import bf16 as gemm_bf16, tuning  # noqa: E402
from routings import SESSION22_ADD_PARTS  # noqa: E402

GEOMETRY = {"andrea-120m": (16, 1024, 768, 12), "andrea-12m": (64, 256, 384, 6)}  # B T C layers
REPS = int(os.environ.get("REPS", "5"))
DEADLINE = time.perf_counter() + float(os.environ.get("DEADLINE", "60"))
TILES = {"ping-pong": tuning.PINGPONG_TILE, "copier": tuning.COPIER_TILE,
         "narrow": tuning.NARROW_COPIER_TILE}
TILE_NAMES = {tile: n for n, tile in TILES.items()}


def ways(M, N, K):
    """[(label, tile or None, split_k or None, deterministic, by parts, patches, summed)] of
    a product; summed: a way whose step's sum the summary prints."""
    routed = tuning.ordered_tile(M, N, K)
    name = TILE_NAMES.get(routed, str(routed))
    split = tuning.default_split_k(M, N, K, routed)
    found = [("atomic (the default)", None, None, False, False, (), True),
             ("turns", None, None, True, False, (), True),
             (f"parts, routed ({name}, {split} splits)", None, None, True, True, (), True),
             ("parts, routed, session 22's add_parts", None, None, True, True,
              SESSION22_ADD_PARTS, True)]
    atomics = tuning.default_tile(M, N, K, True, True, False, True)
    if atomics != routed:           # (andrea-120m's products in turns)
        found.append((f"parts, atomics' tile ({TILE_NAMES.get(atomics, atomics)})", atomics,
                      None, True, True, (), False))
    fewest = -(-K // tuning.MAX_CHAIN)
    for s in sorted({fewest, (fewest + split) // 2, split - 1} - {split}):
        if fewest <= s < split:
            found.append((f"parts, {name} split {s}", routed, s, True, True, (), False))
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
            for label, tile, split_k, deterministic, by_parts, patches, summed in ways(M, N, K):
                if time.perf_counter() > DEADLINE:
                    print("  (deadline: the rest not tried)", flush=True)
                    return totals

                def launch(stream=0):
                    with mock.patch.object(tuning, "ordered_by_parts",
                                           lambda *args: by_parts), \
                            contextlib.ExitStack() as stack:
                        for owner, attribute, value in patches:
                            stack.enter_context(mock.patch.object(owner, attribute, value))
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
