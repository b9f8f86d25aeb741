"""bf16 GEMMs of a training step on the tensor cores, beside torch.mm in bf16 (cuBLAS)."""

import numpy as np

from .gemm_operands import operands
from .timing import CAPTURED_LAUNCHES, captured_time, cuda_time, torch_time

GEMM_CONFIGS = (("andrea-120m", 16, 1024, 768, 50304), ("andrea-12m", 64, 256, 384, 4096))


def gemm_candidates(M, N, K, accumulate, bf16_out):
    """(tile, split_k) pairs the sweep times: the launcher's default first (the tile it
    takes on this GPU, and its split). Accumulating products try 5 and 7 splits beside the
    powers of two: a number of work items that fills its last wave of SMs better (the MLP
    weight gradients' 72 tiles split 4 ways make 288 items, 2.2 waves of 132). The
    persistent tiles (alone, with a copier, in ping-pong, the copier's 128 x 192) on Hopper,
    with those splits and 6, or one for a written out: each split in one chain."""
    from microgpt.kernels.common import ceil_div
    from microgpt.kernels.gemm import tuning
    from microgpt.kernels.gemm.tiles import MmaTile

    tiles = [tuning.LARGE_TILE, tuning.SMALL_TILE, MmaTile(128, 128, 32, 64, 32, 3, 2),
             MmaTile(128, 128, 32, 64, 64, 3, 2),
             MmaTile(128, 64, 32, 64, 32, 4, 2), MmaTile(128, 256, 32, 64, 64, 2),
             MmaTile(256, 128, 32, 64, 64, 2), MmaTile(64, 64, 32, 32, 32, 4, 4),
             tuning.WIDE_TILE, tuning.FOLD_TILE, tuning.TALL_TILE]
    # (as the launcher asks for it: these products have no bias, GELU or ordered split)
    default = tuning.default_tile(M, N, K, accumulate, tuning.wgmma_available(), bf16_out,
                                  persistent=tuning.PERSISTENT_ROUTING)
    # the default again, as a candidate: with no split given, or with its own split
    same = {(default, None), (default, tuning.default_split_k(M, N, K, default)
                                       if accumulate else None)}
    out = [(default, None)]
    for tile in tiles:
        for split in ((1, 2, 4, 5, 7, 8) if accumulate else (None,)):
            if (tile, split) not in same:
                out.append((tile, split))
    if tuning.wgmma_available():
        for tile in (tuning.PERSISTENT_TILE, tuning.COPIER_TILE, tuning.PINGPONG_TILE,
                     tuning.NARROW_COPIER_TILE):
            for split in ((1, 2, 4, 5, 6, 7, 8) if accumulate else (1,)):
                # (each split in one chain: the persistent tiles do not fold)
                if (tile, split) not in same and ceil_div(K, split) <= tuning.MAX_CHAIN:
                    out.append((tile, split))
    return out


def bench_gemm(reps, sweep, captured=False):
    """captured: time microgpt's launches inside a CUDA graph (captured_time) rather than
    eagerly: at andrea-12m's sizes an eager launch costs the host more than the product
    takes the GPU. torch.mm is timed eagerly either way."""
    import torch
    from microgpt.cuda_backend import CudaBackend
    from microgpt.gemms import step_products
    from microgpt.kernels.common import fill_zero
    from microgpt.kernels.gemm import bf16 as gemm_bf16

    if captured:
        ops = CudaBackend()
        timed = lambda fn: captured_time(fn, reps, ops)
    else:
        timed = lambda fn: cuda_time(lambda: fn(0), reps)
    gen = torch.Generator(device="cuda").manual_seed(0)
    rows = []
    for config, B, T, C, V in GEMM_CONFIGS:
        for name, M, N, K, ta, tb, epilogue in step_products(B, T, C, V):
            accumulate = epilogue == "accumulate"
            da, db, out, lhs, rhs = operands(M, N, K, ta, tb, epilogue, gen)
            bf16_out = out.dtype == np.uint16
            fill_zero(out)
            flops = 2 * M * N * K
            timings = []
            for tile, split in (gemm_candidates(M, N, K, accumulate, bf16_out) if sweep
                                else [(None, None)]):
                ms = timed(lambda stream: gemm_bf16.matmul_bf16(
                    out, da, db, ta, tb, accumulate, tile=tile, split_k=split, stream=stream))
                timings.append((ms, tile, split))
            torch_ms = torch_time(lambda: torch.mm(lhs, rhs), reps)
            default_ms = timings[0][0]
            best_ms, best_tile, best_split = min(timings, key=lambda t: t[0])
            rows.append(dict(config=config, name=name, M=M, N=N, K=K, ms=default_ms,
                             torch_ms=torch_ms, flops=flops, best_ms=best_ms,
                             best=f"{tuple(best_tile) if best_tile else 'default'} "
                                  f"split {best_split}"))
            print(f"  {config:12s} {name:16s} {M:6d}x{N:6d}x{K:6d} "
                  f"{flops / default_ms / 1e9:6.0f} TFLOP/s  torch {flops / torch_ms / 1e9:6.0f}"
                  f"  ratio {torch_ms / default_ms:5.2f}"
                  + (f"  best {flops / best_ms / 1e9:6.0f} {rows[-1]['best']}" if sweep else ""),
                  flush=True)
    return rows


def gemm_report(rows, sweep, captured=False):
    lines = ["## bf16 GEMMs of a training step (tensor cores) against torch.mm bf16 (cuBLAS)",
             "",
             "Forward and dX products write what the model's bf16 step writes (bf16 where a "
             "matmul or attention reads it next, float32 into the residual stream and its "
             "gradient; the MLP's GELU epilogues left out: a plain bf16 product); dW products "
             "accumulate into float32 (split-K by default where the output has few tiles); "
             "torch.mm writes bf16 in every row. "
             + (f"microgpt's launches are timed captured in a CUDA graph, "
                f"{CAPTURED_LAUNCHES} a replay, the best replay; torch.mm's eagerly (CUDA "
                "events around its launches)."
                if captured else "Both are timed eagerly (CUDA events around the launches)."),
             "",
             "| config | product | M x N x K | microgpt ms | TFLOP/s | torch ms | TFLOP/s | "
             "ratio |" + (" best TFLOP/s | best tile, split |" if sweep else ""),
             "|---|---|---|---:|---:|---:|---:|---:|" + ("---:|---|" if sweep else "")]
    for r in rows:
        cells = [r["config"], r["name"], f"{r['M']} x {r['N']} x {r['K']}", f"{r['ms']:.3f}",
                 f"{r['flops'] / r['ms'] / 1e9:.0f}", f"{r['torch_ms']:.3f}",
                 f"{r['flops'] / r['torch_ms'] / 1e9:.0f}", f"{r['torch_ms'] / r['ms']:.2f}"]
        if sweep:
            cells += [f"{r['flops'] / r['best_ms'] / 1e9:.0f}", r["best"]]
        lines.append("| " + " | ".join(cells) + " |")
    for config, *_ in GEMM_CONFIGS:
        ratios = [r["torch_ms"] / r["ms"] for r in rows if r["config"] == config]
        if ratios:
            geomean = np.exp(np.mean(np.log(ratios)))
            lines.append(f"\n{config}: geometric mean of the ratios {geomean:.2f}, "
                         f"lowest {min(ratios):.2f}")
    return lines + [""]
