"""head_sweep.TALL_COPIER (three computing warpgroups and a copier, 192 x 192; session 26's
call B: slower than the default tiles on every product, so no longer a tuning tile) held to
float64 on the GPU as tests/test_kernels_gemm_bf16.py's persistent tests hold their tiles
(check_matmul_bf16: the same tolerances, outs poisoned), but with this tile in every case:
drawn sizes with ragged edges (multiples of 8, as the bulk copies need), every transpose,
each epilogue (float32, bf16, accumulate, 2 splits of K; a float32 out of a K longer than
a chain, split into zeros), views of wider matrices, a bias, and the GELU forward's
epilogue; then, unless --small, the LM head's products at andrea-12m's shapes and
andrea-120m's forward. --small: a few tiles' worth of rows, for compute-sanitizer.

    python tile_check.py --cases 24
    compute-sanitizer --tool memcheck --error-exitcode 1 python tile_check.py --small --cases 6
"""
import argparse
import sys
import traceback
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tests"))
import test_kernels_gemm_bf16 as t                                   # noqa: E402
from microgpt.kernels.gemm import tuning                             # noqa: E402
from microgpt.kernels.gemm.tiles import PersistentTile               # noqa: E402

TILE = PersistentTile(192, 192, 64, 3, 3, copier=True)     # (head_sweep.TALL_COPIER)
EPILOGUES = ("float32", "bf16", "accumulate", "split_k", "long")


def case(rng, small):
    top = (600, 500, 400) if small else (4096, 3072, 3072)
    M, N, K = (8 * int(rng.integers(1, s // 8 + 1)) for s in top)
    return (M, N, K, bool(rng.integers(2)), bool(rng.integers(2)),
            EPILOGUES[int(rng.integers(len(EPILOGUES)))], bool(rng.integers(2)),
            bool(rng.integers(2)), int(rng.integers(2**32)))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--cases", type=int, default=24)
    parser.add_argument("--small", action="store_true")
    parser.add_argument("--seed", type=int, default=26)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    failed = 0
    runs = []
    for _ in range(args.cases):
        M, N, K, ta, tb, epilogue, pitched, biased, seed = case(rng, args.small)
        short = epilogue == "long"            # a K longer than a (shortened) chain
        biased = biased and epilogue in ("float32", "bf16")
        runs.append((f"{M}x{N}x{K} ta={ta} tb={tb} {epilogue} pitched={pitched} "
                     f"biased={biased}", lambda M=M, N=N, K=K, ta=ta, tb=tb, e=epilogue,
                     p=pitched, b=biased, s=seed, short=short: t.check_matmul_bf16(
                         M, N, K, ta, tb, "float32" if short else e, TILE, s,
                         split_k={"accumulate": 1, "split_k": 2}.get(e),
                         max_chain=2 * TILE.depth if short else tuning.MAX_CHAIN,
                         pitched=p, biased=b)))
    M, N, K = (8 * int(rng.integers(1, s // 8 + 1)) for s in ((600, 500, 400) if args.small
                                                               else (4096, 3072, 768)))
    runs.append((f"gelu {M}x{N}x{K}", lambda: t.check_matmul_gelu(M, N, K, False, TILE, 7)))
    if not args.small:
        for name, M, N, K, ta, tb, epilogue in t.step_products(64, 256, 384, 4096)[-3:] + [
                t.step_products(16, 1024, 768, 50304)[-3]]:
            runs.append((f"{name} {M}x{N}x{K}", lambda M=M, N=N, K=K, ta=ta, tb=tb,
                         e=epilogue: t.check_matmul_bf16(M, N, K, ta, tb, e, TILE, 5,
                                                         split_k=None)))
    for what, run in runs:
        try:
            run()
            print(f"ok   {what}", flush=True)
        except Exception:
            failed += 1
            print(f"FAIL {what}\n{traceback.format_exc()[-1500:]}", flush=True)
    print(f"tile_check {TILE}: {len(runs) - failed} ok, {failed} failed", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
