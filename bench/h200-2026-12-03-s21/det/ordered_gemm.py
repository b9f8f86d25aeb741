"""The products that --deterministic adds in order (ordered split-K: every weight gradient,
and the LM head's dX where K = V is longer than one chain), each captured (20 launches a
CUDA graph, the best of REPS replays) in the ways it can run:

  atomic      the default's: the launcher's tile (the persistent kernel's), atomic adds
  wgmma       ordered on the wgmma kernel's tile (tuning.default_tile without persistent):
              --deterministic until session 21
  persistent  ordered on the persistent kernel's tile (tuning.persistent_tile) and splits
  p-fewest    the same with the fewest splits that keep a chain within MAX_CHAIN
  p-other     the other persistent tile (copier <-> ping-pong), its default splits

Before its timing each ordered way runs twice from the same out: the same bits both times,
and the relative error against torch.mm in float32 (TF32 off) of the same bf16 operands.

    python3 ordered_gemm.py [CONFIG:VOCAB ...]    # default andrea-120m:4096 andrea-12m:4096
"""
import math
import os
import sys

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

GEOMETRY = {"andrea-120m": (16, 1024, 768, 12), "andrea-12m": (64, 256, 384, 6)}  # B T C layers
REPS = int(os.environ.get("REPS", "5"))
WAYS = ("atomic", "wgmma", "persistent", "p-fewest", "p-other")


def way(name, M, N, K, accumulate):
    """(tile, split_k, deterministic) of a way, or None where it cannot run the product."""
    own = tuning.persistent_tile(N)
    if name == "atomic":
        return None, None, False
    if name == "wgmma":
        return tuning.default_tile(M, N, K, accumulate, True, False), None, True
    if name == "persistent":
        return own, None, True
    if name == "p-fewest":          # (a written out's splits are the launcher's own)
        return (own, -(-K // tuning.MAX_CHAIN), True) if accumulate else None
    other = tuning.COPIER_TILE if own == tuning.PINGPONG_TILE else tuning.PINGPONG_TILE
    return other, None, True


def main(specs):
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False
    ops = CudaBackend()
    rng = np.random.default_rng(0)
    print("| config | vocab | product | M x N x K | tile, splits | " + " | ".join(
        f"{w} ms" for w in WAYS) + " | persistent / wgmma | persistent / atomic |", flush=True)
    print("|---|---:|---|---|---|" + "---:|" * (len(WAYS) + 2), flush=True)
    totals = {}
    for spec in specs:
        config, vocab = spec.split(":")
        B, T, C, layers = GEOMETRY[config]
        for name, M, N, K, ta, tb, epilogue in step_products(B, T, C, int(vocab)):
            accumulate = epilogue == "accumulate"
            if not (accumulate or (epilogue == "float32" and K > tuning.MAX_CHAIN)):
                continue                # not ordered in --deterministic
            da, db, out, lhs, rhs = operands(M, N, K, ta, tb, epilogue, rng)
            ref = torch.mm(lhs.float(), rhs.float())
            own = tuning.persistent_tile(N)
            splits = tuning.default_split_k(M, N, K, own)
            ms, notes = {}, []
            for w in WAYS:
                chosen = way(w, M, N, K, accumulate)
                if chosen is None:
                    continue
                tile, split_k, deterministic = chosen

                def launch(stream=0):
                    gemm_bf16.matmul_bf16(out, da, db, ta, tb, accumulate, tile=tile,
                                          split_k=split_k, deterministic=deterministic,
                                          stream=stream)
                try:
                    if deterministic:
                        runs = []
                        for _ in range(2):
                            out.copy_to_device(np.zeros(out.shape, np.float32))
                            launch()
                            cuda.synchronize()
                            runs.append(out.copy_to_host())
                        same = np.array_equal(runs[0].view(np.uint32), runs[1].view(np.uint32))
                        err = float(torch.linalg.norm(as_float(out) - ref)
                                    / torch.linalg.norm(ref))
                        notes.append(f"{w}: same bits {same}, rel err {err:.1e}"
                                     + ("" if same and err < 1e-5 else " FAILED"))
                    ms[w] = captured_time(launch, REPS, ops)
                except Exception as e:
                    notes.append(f"{w}: {type(e).__name__}: {str(e).splitlines()[0][:150]}")
            for w, t in ms.items():         # a step's: each layer's product, the LM head's once
                totals.setdefault((spec, w), []).append(t * (1 if "LM head" in name
                                                              else layers))
            ratio = lambda x, y: f"{ms[x] / ms[y]:.3f}" if x in ms and y in ms else "-"
            print(f"| {config} | {vocab} | {name} | {M} x {N} x {K} | "
                  f"{'ping-pong' if own.pingpong else 'copier'}, {splits} | " + " | ".join(
                      f"{ms[w]:.4f}" if w in ms else "-" for w in WAYS)
                  + f" | {ratio('persistent', 'wgmma')} | {ratio('persistent', 'atomic')} |",
                  flush=True)
            print("    " + "; ".join(notes), flush=True)
    for (spec, w), times in totals.items():
        print(f"{spec} {w}: {sum(times):.4f} ms a step ({len(times)} products)", flush=True)


if __name__ == "__main__":
    if os.environ.get("MICROGPT_CACHE_DIR"):
        cache.use(os.environ["MICROGPT_CACHE_DIR"])
    main(sys.argv[1:] or ["andrea-120m:4096", "andrea-12m:4096"])
