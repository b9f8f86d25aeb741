"""The LM head's three products (forward, dX, dW) at a chunk of 8192 rows (model.head_rows)
and over all 16,384 (torch.compile's one launch), every persistent tile the GEMM layer
offers and a few splits of K, beside torch.mm captured: which tile and split the tuning
policy should give the head. Session 24's profile had microgpt's head at 1.750 (forward),
1.744 (dX) and 1.687 ms (dW) a step against torch.compile's cuBLAS launches' 1.730, 1.373
and 1.369 (andrea-120m, H200: bench/h200-2026-12-04-s24/gemm/callB/profile_120m.md).

Each candidate is checked first against torch.mm of the same operands (relative error
of the norm under 1e-2: a wrong tile says WRONG and is not timed), then timed as
benchmarks.timing.captured_time does: 20 launches captured in one graph, the fastest of
--reps replays. A split given to a written float32 out (the dX, K = V) zeroes out and
accumulates, as the launcher's own split of it does (bf16.splits_written), the zeroing
timed with it. TALL_COPIER is a tile the tuning policy does not name yet: the copier's
block with three computing warpgroups on 192 x 192 tiles (cuBLAS's tile for the head,
nvjet_sm90_tst_192x192_64x3), 3 stages of 48 KiB; 152 registers a computing thread, no
spill (sm_90a, ptxas whole-program).

    python head_sweep.py --configs andrea-120m andrea-12m --reps 5 --json winners.json

--json: each product's fastest candidate where it beats the default by 1% or more, for
step_ab.py to route the step's head to.
"""
import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch

sys.path[:0] = [str(Path(__file__).resolve().parents[3] / "tools")]
from benchmarks.gemm_operands import as_float, operands                   # noqa: E402
from benchmarks.timing import captured_time, torch_captured_time          # noqa: E402
from microgpt.cuda_backend import CudaBackend                             # noqa: E402
from microgpt.data import default_cache_dir                               # noqa: E402
from microgpt.gemms import step_products                                  # noqa: E402
from microgpt.kernels import cache as kernel_cache                        # noqa: E402
from microgpt.kernels.common import ceil_div, fill_zero                   # noqa: E402
from microgpt.kernels.gemm import bf16 as gemm_bf16                       # noqa: E402
from microgpt.kernels.gemm import tuning                                  # noqa: E402
from microgpt.kernels.gemm.tiles import PersistentTile                    # noqa: E402

HEADS = {"andrea-120m": (16 * 1024, 768, 50304), "andrea-12m": (64 * 256, 384, 4096)}
STEPS = {"andrea-120m": (16, 1024), "andrea-12m": (64, 256)}
TALL_COPIER = PersistentTile(192, 192, 64, 3, 3, copier=True)
TILES = {"copier": tuning.COPIER_TILE, "narrow": tuning.NARROW_COPIER_TILE,
         "pingpong": tuning.PINGPONG_TILE, "cluster": tuning.CLUSTER_TILE,
         "tall_copier": TALL_COPIER}
NAMES = dict(TILES)                       # (TILES: those --tiles keeps)


def head_products(rows, C, V):
    """(name, M, N, K, transpose_a, transpose_b, out) of the head over `rows` rows."""
    return [("forward", rows, V, C, False, True, "bf16"),
            ("dX", rows, C, V, False, False, "float32"),
            ("dW", V, C, rows, True, False, "accumulate")]


def candidates(M, N, K, out):
    """(label, tile, split) the sweep times, the launcher's default first (and not again
    under its tile's label). Splits: the
    least that keeps a chain within MAX_CHAIN (the persistent tiles do not fold) and one
    more; for a weight gradient twice the least too, and the tile's own default split."""
    least = ceil_div(K, tuning.MAX_CHAIN)
    splits = ([None] if out == "bf16" or (out == "float32" and least == 1)
              else [least, least + 1] if out == "float32"
              else [None] + sorted({least, least + 1, 2 * least}))
    def resolved(tile, split):        # the split the launcher takes for None
        if split is None and (out == "accumulate" or tuning.splits_written(
                K, False, out == "bf16", tile)):
            return tuning.default_split_k(M, N, K, tile)
        return split

    # the launcher's own choice, which a candidate repeats only as "default"
    tile = tuning.default_tile(M, N, K, out == "accumulate", tuning.wgmma_available(),
                               out == "bf16", tuning.PERSISTENT_ROUTING)
    name = next((n for n, t in NAMES.items() if t == tile), str(tuple(tile)))
    found, seen = [(f"default ({name}, split {resolved(tile, None)})", None, None)], {
        (tile, resolved(tile, None))}
    for label, tile in TILES.items():
        for split in splits:
            if out == "float32" and split == 1:
                split = None              # (a K within a chain: written, not split)
            if (tile, resolved(tile, split)) not in seen:
                seen.add((tile, resolved(tile, split)))
                found.append((label, tile, split))
    return found


def check(out, fn, ops, expected, accumulating):
    """fn run once on a zeroed (or unwritten) out, against torch's product."""
    if accumulating:
        fill_zero(out, ops.stream)
    fn(ops.stream)
    ops.synchronize()
    got = as_float(out)
    return float(torch.linalg.norm(got - expected) / torch.linalg.norm(expected))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--configs", nargs="+", default=["andrea-120m"])
    parser.add_argument("--rows", nargs="+", type=int, default=[8192, 16384])
    parser.add_argument("--products", nargs="+", default=["forward", "dX", "dW"])
    parser.add_argument("--tiles", nargs="+", default=list(TILES))
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--blocks", action="store_true",
                        help="the W_O and MLP down forwards (float32 outs) too")
    parser.add_argument("--step-products", action="store_true",
                        help="every other product of the step too (with --rows 0: those alone)")
    parser.add_argument("--json", help="write the winners here")
    args = parser.parse_args()
    for label in list(TILES):
        if label not in args.tiles:
            del TILES[label]
    kernel_cache.use(default_cache_dir() / "kernels")   # the trainer's compiled kernels
    ops = CudaBackend()
    gen = torch.Generator(device="cuda").manual_seed(0)
    winners = {}
    print("| config | product | M x N x K | tile | split | ms | TFLOP/s | default / this "
          "| torch.mm captured ms | torch / this | error |\n"
          "|---|---|---|---|--:|--:|--:|--:|--:|--:|--:|", flush=True)
    products = []
    for config in args.configs:
        N_rows, C, V = HEADS[config]
        for rows in filter(None, args.rows):
            products += [(config, *p) for p in head_products(min(rows, N_rows), C, V)
                         if p[0] in args.products]
        if args.blocks:                   # (their float32 outs, written: no split)
            products += [(config, name, N_rows, C, n_in, False, False, "float32")
                         for name, n_in in (("W_O forward", C), ("MLP down forward", 4 * C))]
        if args.step_products:            # the blocks' twelve (GELU's as plain bf16 outs)
            B, T = STEPS[config]
            products += [(config, name, M, N, K, ta, tb,
                          "bf16" if "gelu" in epilogue else epilogue)
                         for name, M, N, K, ta, tb, epilogue in step_products(B, T, C, V)
                         if "LM head" not in name]
    for config, name, M, N, K, ta, tb, out_kind in products:
        da, db, out, lhs, rhs = operands(M, N, K, ta, tb, out_kind, gen)
        expected = torch.mm(lhs, rhs).float()
        torch_ms = torch_captured_time(lambda: torch.mm(lhs, rhs), args.reps)
        flops = 2 * M * N * K
        accumulate = out_kind == "accumulate"
        timings = []
        for label, tile, split in candidates(M, N, K, out_kind):
            # a split of a written float32 out: zeroed, then accumulated into
            zeroed = out_kind == "float32" and split is not None

            def fn(stream, tile=tile, split=split, zeroed=zeroed):
                if zeroed:
                    fill_zero(out, stream)
                gemm_bf16.matmul_bf16(out, da, db, ta, tb, accumulate or zeroed,
                                      tile=tile, split_k=split, stream=stream)
            cell = f"| {config} | {name} | {M} x {N} x {K} | {label} | {split or '-'} |"
            try:
                error = check(out, fn, ops, expected, accumulate)
            except Exception as e:     # a tile the launcher refuses for this shape
                print(f"{cell} refused: {type(e).__name__}: {e} |"[:300], flush=True)
                continue
            if not error < 1e-2:
                print(f"{cell} WRONG | | | | | {error:.1e} |", flush=True)
                continue
            ms = captured_time(fn, args.reps, ops)
            timings.append((ms, label, tile, split))
            default_ms = timings[0][0]
            print(f"{cell} {ms:.4f} | {flops / ms / 1e9:.0f} | {default_ms / ms:.3f} "
                  f"| {torch_ms:.4f} | {torch_ms / ms:.3f} | {error:.1e} |", flush=True)
        best = min(timings, key=lambda t: t[0])
        if best[0] * 1.01 <= timings[0][0]:
            winners[f"{M}x{N}x{K}"] = dict(config=config, product=name, ms=best[0],
                                           default_ms=timings[0][0], label=best[1],
                                           tile=list(best[2]), split=best[3])
        del da, db, out, lhs, rhs, expected
        torch.cuda.empty_cache()
    print("\nwinners (1% or more under the default):", json.dumps(winners, indent=1), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(winners, f, indent=1)


if __name__ == "__main__":
    main()
