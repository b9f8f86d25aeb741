"""The captured training step with the LM head's products routed to head_sweep.py's winners,
beside the default routing, in one process: each variant's Step built (its first run
eager, the second captured) under its own routing, then the graphs replayed in turns,
--rounds rounds of --steps steps each (the step's time: the wall clock over the steps, the
one read back at the end), the best round of each. Each variant's device memory: the free
memory before its model and Step and after its capture (bench_steps' measure); and the
losses and gradient norms of its first two steps (the same model and batch in each: the
routing's products checked in the step).

Variants: "default"; "routed" (the winners of the head's chunk shapes, from --winners);
"whole" (--whole: activations.HEAD_ROWS 16384, the head over all the batch's rows in one chunk,
routed by the winners of those shapes where there are some): the memory trade-off;
"blocks" (the winners of the W_O and MLP down forwards, head_sweep.py --blocks).

    python step_ab.py --config andrea-120m --batch-size 16 --seq-len 1024 \
        --winners winners.json --rounds 5 --steps 10
"""
import argparse
import gc
import json
import time
from contextlib import contextmanager

import numpy as np
from numba import cuda

from microgpt import GPT, get_config
from microgpt import activations
from microgpt.cuda_backend import CudaBackend
from microgpt.data import default_cache_dir
from microgpt.kernels import cache as kernel_cache
from microgpt.kernels.gemm import bf16 as gemm_bf16
from microgpt.kernels.gemm.tiles import PersistentTile
from microgpt.optim import AdamW, AdamWConfig
from microgpt.step import Step


@contextmanager
def routed(winners, head_rows=None):
    """The launcher's tile and split for the winners' shapes ("MxNxK") as they say;
    head_rows: activations.HEAD_ROWS meanwhile."""
    base_tile, base_split, base_rows = (gemm_bf16.default_tile, gemm_bf16.default_split_k,
                                        activations.HEAD_ROWS)
    chosen = {key: (PersistentTile(*w["tile"]), w["split"]) for key, w in winners.items()}

    def tile(M, N, K, accumulate=False, wgmma=False, bf16_out=False, persistent=False):
        if wgmma and persistent and f"{M}x{N}x{K}" in chosen:
            return chosen[f"{M}x{N}x{K}"][0]
        return base_tile(M, N, K, accumulate, wgmma, bf16_out, persistent)

    def split(M, N, K, tile, *args):
        got = chosen.get(f"{M}x{N}x{K}")
        if got and got[1] and tuple(tile) == tuple(got[0]):
            return got[1]
        return base_split(M, N, K, tile, *args)

    gemm_bf16.default_tile, gemm_bf16.default_split_k = tile, split
    if head_rows:
        activations.HEAD_ROWS = head_rows
    try:
        yield
    finally:
        gemm_bf16.default_tile, gemm_bf16.default_split_k = base_tile, base_split
        activations.HEAD_ROWS = base_rows


def build(cfg, B, T, idx, targets):
    gc.collect()
    cuda.current_context().deallocations.clear()
    free_before, _ = cuda.current_context().get_memory_info()
    model = GPT(cfg, backend=CudaBackend(), precision="bf16")
    step = Step(model, AdamW(model, AdamWConfig(total_steps=10**6)), B, T)
    for _ in range(2):                  # compile; then capture
        step.run(idx, targets)
    log = step.metrics()
    free_after, _ = cuda.current_context().get_memory_info()
    return step, (free_before - free_after) / 2**30, log["loss"], log["grad_norm"]


def step_ms(step, idx, targets, steps):
    step.metrics()
    t0 = time.perf_counter()
    for _ in range(steps):
        step.run(idx, targets)
    step.metrics()
    return 1e3 * (time.perf_counter() - t0) / steps


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", default="andrea-120m")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--seq-len", type=int, default=1024)
    parser.add_argument("--winners", required=True, help="head_sweep.py's --json")
    parser.add_argument("--vocab-size", type=int, help="(a config that takes it)")
    parser.add_argument("--whole", action="store_true")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=10)
    args = parser.parse_args()
    kernel_cache.use(default_cache_dir() / "kernels")   # the trainer's compiled kernels
    cfg = get_config(args.config, **({"vocab_size": args.vocab_size} if args.vocab_size else {}))
    B, T = args.batch_size, args.seq_len
    rng = np.random.default_rng(0)
    idx = rng.integers(0, cfg.vocab_size, (B, T)).astype(np.int32)
    targets = rng.integers(0, cfg.vocab_size, (B, T)).astype(np.int32)
    try:
        with open(args.winners) as f:
            winners = {key: w for key, w in json.load(f).items() if w["config"] == args.config}
    except FileNotFoundError:         # (the sweep cut before it wrote them)
        print(f"{args.winners}: not found; the default routing only", flush=True)
        winners = {}
    rows = activations.head_rows(B * T)
    head = {key: w for key, w in winners.items() if w["product"] in ("forward", "dX", "dW")}
    chunk = {key: w for key, w in head.items() if str(rows) in key.split("x")}
    whole = {key: w for key, w in head.items() if str(B * T) in key.split("x")}
    blocks = {key: w for key, w in winners.items() if key not in head}
    variants = [("default", {}, None)] + ([("routed", chunk, None)] if chunk else []) + (
        [("whole", whole, B * T)] if args.whole else []) + (
        [("blocks", blocks, None)] if blocks else [])
    for name, chosen, _ in variants[1:]:
        print(f"{args.config} B {B} T {T} (head chunk {rows} rows), {name}: "
              + (", ".join(f"{w['product']} {k} -> {w['label']} split {w['split']}"
                           for k, w in chosen.items()) or "the default routing"), flush=True)
    steps, gib = {}, {}
    for name, chosen, head_rows in variants:
        try:
            with routed(chosen, head_rows):
                steps[name], gib[name], losses, norms = build(cfg, B, T, idx, targets)
        except Exception as e:        # (one variant's failure leaves the others to time)
            print(f"  {name}: FAILED {type(e).__name__}: {e}"[:400], flush=True)
            continue
        # (the same model and batch: the first two steps' losses and norms agree to a
        # rounding where the routing computes the same products)
        print(f"  {name}: built, {gib[name]:.2f} GiB; the first steps' losses {losses}, "
              f"gradient norms {norms}", flush=True)
    best = {name: float("inf") for name in steps}
    for r in range(args.rounds):
        for name, step in steps.items():
            ms = step_ms(step, idx, targets, args.steps)
            best[name] = min(best[name], ms)
            print(f"  round {r} {name}: {ms:.3f} ms", flush=True)
    print(f"\n| {args.config} variant | step ms (best of {args.rounds} x {args.steps}) | "
          "tokens/s | / default | GiB |\n|---|--:|--:|--:|--:|")
    for name in steps:
        print(f"| {name} | {best[name]:.3f} | {B * T / best[name] * 1e3:,.0f} | "
              f"{best[name] / best.get('default', float('nan')):.4f} | {gib[name]:.2f} |",
              flush=True)


if __name__ == "__main__":
    main()
