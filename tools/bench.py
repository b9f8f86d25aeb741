#!/usr/bin/env python3
"""Speed and memory of microgpt's CUDA backend, against PyTorch measured in the same run.

    python tools/bench.py --out bench/RESULTS.md            # everything (needs a GPU + torch)
    python tools/bench.py --only kernels --out /tmp/k.md

Seven sections:
  gemm     every GEMM of an andrea-120m and an andrea-12m training step on the bf16 tensor
           cores (kernels/gemm_bf16.py), in TFLOP/s beside torch.mm in bf16 (cuBLAS);
           --gemm-sweep also times every tile and split-K candidate and reports the best;
           --gemm-captured times microgpt's launches in a CUDA graph, as the step runs;
  attention  flash attention on the tensor cores (kernels/flash_attention.py), forward and
           forward + backward, beside SDPA in bf16 (causal) at andrea-120m, andrea-12m and
           head_dim 72 shapes; --attention-sweep also times the tile candidates;
  kernels  every backend op at andrea-120m shapes (B 16, T 1024, C 768, 12 heads of 64,
           V 50304), timed with CUDA events, beside the PyTorch op that does the same work
           in float32 (TF32 off);
  steps    tokens/s and peak device memory of a whole training step (forward, backward,
           AdamW) for andrea-12m (B 64, T 256) and andrea-120m (B 16, T 1024) in fp32 and
           bf16, beside a PyTorch model of the same architecture in float32 (TF32 off), bf16
           autocast, and bf16 autocast under torch.compile;
  fused    the fused kernels of mixed precision (residual + LayerNorm, cross-entropy
           forward + backward, bf16 outputs) at andrea-120m shapes, beside the unfused
           launches they replace;
  generate tokens/s of python -m microgpt.sample's generation (microgpt/generate.py, a KV
           cache) for andrea-12m and andrea-120m, beside the full-window generation it
           replaced (a forward over the whole context window per token, every logit copied
           back); --device cpu measures it on the NumPy backend, without a GPU or torch.
The file written holds the machine, the versions and the command. Ratios are what count:
absolute figures move 10-30% between runs.
"""

import argparse
import datetime
import importlib.metadata
import os
import platform
import sys
import time

import numpy as np


def cuda_time(fn, reps, warmup=2):
    """Mean milliseconds of fn() over reps, by CUDA events on the default stream."""
    from numba import cuda

    for _ in range(warmup):
        fn()
    start, stop = cuda.event(timing=True), cuda.event(timing=True)
    start.record()
    for _ in range(reps):
        fn()
    stop.record()
    stop.synchronize()
    return cuda.event_elapsed_time(start, stop) / reps


CAPTURED_LAUNCHES = 20     # of one GEMM in a graph, for captured_time


def captured_time(fn, reps, ops, launches=CAPTURED_LAUNCHES):
    """Milliseconds a launch of fn(stream) takes inside a CUDA graph, as a captured step
    runs it: `launches` of them captured in one graph on the backend's stream, the fastest
    of reps replays. fn runs once eagerly first (it compiles there, and makes its tensor
    maps, which the captured launches then find)."""
    from numba import cuda

    fn(ops.stream)
    ops.synchronize()
    graph = ops.capture(lambda: [fn(ops.stream) for _ in range(launches)])
    best = float("inf")
    for _ in range(reps):
        start, stop = cuda.event(timing=True), cuda.event(timing=True)
        start.record(ops.stream)
        graph.replay()
        stop.record(ops.stream)
        stop.synchronize()
        best = min(best, cuda.event_elapsed_time(start, stop) / launches)
    return best


def torch_time(fn, reps, warmup=2):
    import torch

    for _ in range(warmup):
        fn()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        fn()
    stop.record()
    stop.synchronize()
    return start.elapsed_time(stop) / reps


# ----------------------------------------------------------------------------------
# bf16 GEMMs of a training step

GEMM_CONFIGS = (("andrea-120m", 16, 1024, 768, 50304), ("andrea-12m", 64, 256, 384, 4096))


def gemm_candidates(M, N, K, accumulate, bf16_out):
    """(tile, split_k) pairs the sweep times: the launcher's default first (the tile it
    takes on this GPU, and its split). Accumulating products try 5 and 7 splits beside the
    powers of two: a number of work items that fills its last wave of SMs better (the MLP
    weight gradients' 72 tiles split 4 ways make 288 items, 2.2 waves of 132)."""
    from microgpt.kernels import gemm_bf16
    from microgpt.kernels.gemm_bf16 import MmaTile

    tiles = [gemm_bf16.LARGE_TILE, gemm_bf16.SMALL_TILE, MmaTile(128, 128, 32, 64, 32, 3, 2),
             MmaTile(128, 128, 32, 64, 64, 3, 2),
             MmaTile(128, 64, 32, 64, 32, 4, 2), MmaTile(128, 256, 32, 64, 64, 2),
             MmaTile(256, 128, 32, 64, 64, 2), MmaTile(64, 64, 32, 32, 32, 4, 4),
             gemm_bf16.WIDE_TILE, gemm_bf16.FOLD_TILE, gemm_bf16.TALL_TILE]
    default = gemm_bf16.default_tile(M, N, K, accumulate, gemm_bf16.wgmma_available(),
                                     bf16_out)
    # the default again, as a candidate: with no split given, or with its own split
    same = {(default, None), (default, gemm_bf16.default_split_k(M, N, K, default)
                                       if accumulate else None)}
    out = [(default, None)]
    for tile in tiles:
        for split in ((1, 2, 4, 5, 7, 8) if accumulate else (None,)):
            if (tile, split) not in same:
                out.append((tile, split))
    return out


def bench_gemm(reps, sweep, captured=False):
    """captured: time microgpt's launches inside a CUDA graph (captured_time) rather than
    eagerly: at andrea-12m's sizes an eager launch costs the host more than the product
    takes the GPU. torch.mm is timed eagerly either way."""
    import ml_dtypes
    import torch
    from numba import cuda
    from microgpt.cuda_backend import CudaBackend
    from microgpt.kernels import gemm_bf16

    if captured:
        ops = CudaBackend()
        timed = lambda fn: captured_time(fn, reps, ops)
    else:
        timed = lambda fn: cuda_time(lambda: fn(0), reps)
    rng = np.random.default_rng(0)
    rows = []
    for config, B, T, C, V in GEMM_CONFIGS:
        for name, M, N, K, ta, tb, epilogue in gemm_bf16.step_products(B, T, C, V):
            accumulate = epilogue == "accumulate"
            a = rng.standard_normal((K, M) if ta else (M, K), np.float32)
            b = rng.standard_normal((N, K) if tb else (K, N), np.float32)
            da = cuda.to_device(a.astype(ml_dtypes.bfloat16).view(np.uint16))
            db = cuda.to_device(b.astype(ml_dtypes.bfloat16).view(np.uint16))
            bf16_out = epilogue not in ("accumulate", "float32")
            out = cuda.to_device(np.zeros((M, N), np.uint16 if bf16_out else np.float32))
            flops = 2 * M * N * K
            timings = []
            for tile, split in (gemm_candidates(M, N, K, accumulate, bf16_out) if sweep
                                else [(None, None)]):
                ms = timed(lambda stream: gemm_bf16.matmul_bf16(
                    out, da, db, ta, tb, accumulate, tile=tile, split_k=split, stream=stream))
                timings.append((ms, tile, split))
            ta_t = torch.from_numpy(a).cuda().bfloat16()
            tb_t = torch.from_numpy(b).cuda().bfloat16()
            lhs, rhs = (ta_t.T if ta else ta_t), (tb_t.T if tb else tb_t)
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


# ----------------------------------------------------------------------------------
# flash attention (bf16, tensor cores) beside SDPA

ATTENTION_SHAPES = (("andrea-120m", 16, 12, 1024, 64), ("andrea-12m", 64, 12, 256, 32),
                    ("head_dim 72", 16, 12, 1024, 72))


def attention_candidates(D):
    """(forward tiles, (dq tile, dk/dv tile) pairs) the sweep times, defaults first; each
    backward pass varied alone (the two are timed together). Beside the tile shapes: 32
    rows per warp, launch bounds for 2-4 blocks per SM, and three stages."""
    from microgpt.kernels import flash_attention as fa
    from microgpt.kernels.flash_attention import FlashTile as F

    def usable(tiles, kind):
        kept = []
        for tile in tiles:
            try:
                fa.check_tile(tile, D, kind)
            except ValueError:
                continue
            kept.append(tile)
        return kept

    dq, dkdv = fa.default_tile(D, "dq"), fa.default_tile(D, "dkdv")
    forward = [fa.default_tile(D, "forward")] + usable(
        [F(128, 64), F(64, 64), F(128, 64, 16, 2), F(64, 64, 16, 4), F(128, 32, 16, 2),
         F(128, 64, 32), F(128, 32, 32), F(64, 32, 16, 2)], "forward")
    others = [F(64, 32), F(64, 64), F(64, 32, 16, 2), F(128, 32, 32), F(64, 32, stages=3),
              F(64, 64, stages=3)]
    backward = ([(dq, dkdv)] + [(t, dkdv) for t in usable(others, "dq")]
                + [(dq, t) for t in usable(others, "dkdv")])
    return list(dict.fromkeys(forward)), list(dict.fromkeys(backward))


def variant_text(variant):
    """A tile (rows, step, warp_rows, min_blocks), or a backward pair, as the report
    prints it."""
    if isinstance(variant[0], int):
        return str(tuple(variant))
    return f"dq {tuple(variant[0])}, dk/dv {tuple(variant[1])}"


def best_variant(run, variants, result, reps):
    """(ms, variant) of the fastest variant whose result() (its output, float64 on the host)
    agrees with the first variant's, which is the default; every timing is printed."""
    timings, reference = [], None
    for variant in variants:
        run(variant)
        got = result()
        if reference is None:
            reference = got
        elif np.linalg.norm(got - reference) > 1e-2 * np.linalg.norm(reference):
            print(f"    variant {variant_text(variant)}: result differs from the default's, "
                  "not timed")
            continue
        timings.append((cuda_time(lambda: run(variant), reps), variant))
        print(f"    {timings[-1][0]:.4f} ms  {variant_text(variant)}", flush=True)
    return min(timings, key=lambda t: t[0])


def bf16_host(array):
    """A device array of bf16 bits -> its values in float64 on the host."""
    import ml_dtypes

    return array.copy_to_host().view(ml_dtypes.bfloat16).astype(np.float64)


def time_flash_attention(host, reps, sweep):
    """Our forward, backward and both, in ms; with sweep the best tiles of each."""
    import ml_dtypes
    from numba import cuda
    from microgpt.kernels import flash_attention as fa

    shape = host[0].shape
    q, k, v, dout = (cuda.to_device(x.astype(ml_dtypes.bfloat16).view(np.uint16))
                     for x in host)
    out, dq, dk, dv = (cuda.device_array(shape, np.uint16) for _ in range(4))
    lse, delta = (cuda.device_array(shape[:3], np.float32) for _ in range(2))

    def forward(tile=None):
        fa.flash_attention_forward(out, lse, q, k, v, tile=tile)

    def backward(tiles=(None, None)):
        fa.flash_attention_backward(dq, dk, dv, delta, dout, q, k, v, out, lse, tiles=tiles)

    row = dict(fwd=cuda_time(forward, reps), bwd=cuda_time(backward, reps),
               both=cuda_time(lambda: (forward(), backward()), reps))
    if sweep:
        forward_tiles, backward_tiles = attention_candidates(shape[-1])
        row["best_fwd"] = best_variant(forward, forward_tiles, lambda: bf16_host(out), reps)
        forward()
        row["best_bwd"] = best_variant(backward, backward_tiles, lambda: bf16_host(dq), reps)
    return row


def time_sdpa(host, reps):
    import torch
    import torch.nn.functional as F

    q, k, v = (torch.from_numpy(x).cuda().bfloat16().requires_grad_() for x in host[:3])
    dout = torch.from_numpy(host[3]).cuda().bfloat16()

    def sdpa():
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    return dict(sdpa_fwd=torch_time(sdpa, reps),
                sdpa_both=torch_time(lambda: torch.autograd.grad(sdpa(), (q, k, v), dout),
                                     reps))


def time_fp32_attention(host, reps):
    """The float32 kernels (kernels/attention.py): forward, and forward + backward."""
    from numba import cuda
    from microgpt.kernels import attention

    q, k, v, dout = (cuda.to_device(x) for x in host)
    out, dq, dk, dv = (cuda.device_array(q.shape, np.float32) for _ in range(4))
    lse, delta = (cuda.device_array(q.shape[:3], np.float32) for _ in range(2))

    def forward():
        attention.attention_forward(out, lse, q, k, v)

    def both():
        forward()
        attention.attention_backward(dq, dk, dv, delta, dout, q, k, v, out, lse)

    return dict(fp32_fwd=cuda_time(forward, reps), fp32_both=cuda_time(both, reps))


def bench_flash_attention(reps, sweep):
    rng = np.random.default_rng(0)
    rows = []
    for config, B, H, T, D in ATTENTION_SHAPES:
        host = [rng.standard_normal((B, H, T, D), np.float32) for _ in range(4)]
        row = dict(config=config, shape=(B, H, T, D), flops=2 * B * H * T * T * D,
                   **time_flash_attention(host, reps, sweep), **time_sdpa(host, reps))
        if D % 16:          # the target there: no slower than the float32 kernels
            row.update(time_fp32_attention(host, max(2, reps // 4)))
        rows.append(row)
        print(f"  {config:12s} {row['shape']}  fwd {row['fwd']:.3f} ms "
              f"(SDPA {row['sdpa_fwd']:.3f})  bwd {row['bwd']:.3f} ms  "
              f"fwd+bwd {row['both']:.3f} ms "
              f"(SDPA {row['sdpa_both']:.3f})"
              + (f"  fp32 {row['fp32_fwd']:.3f} / {row['fp32_both']:.3f}" if D % 16 else "")
              + (f"  best fwd {variant_text(row['best_fwd'][1])}, {row['best_fwd'][0]:.3f}"
                 f"  best bwd {variant_text(row['best_bwd'][1])}, {row['best_bwd'][0]:.3f}"
                 if sweep else ""),
              flush=True)
    return rows


def attention_report(rows, sweep):
    lines = ["## Flash attention (bf16, tensor cores) against SDPA bf16, causal",
             "",
             "microgpt: kernels/flash_attention.py with its default tiles; fwd+bwd = forward, "
             "then the dq and dk/dv passes. TFLOP/s count the causal half (fwd 4BHT²D/2, "
             "bwd 2.5x). Ratios are microgpt / SDPA time (targets: fwd <= 1.3, fwd+bwd <= 1.5).",
             "",
             "| shape (B, H, T, D) | fwd ms | TFLOP/s | SDPA fwd ms | ratio | bwd ms | "
             "fwd+bwd ms | TFLOP/s | SDPA fwd+bwd ms | ratio | fp32 kernel fwd / fwd+bwd ms |"
             + (" best fwd tile, ms | best bwd tiles, ms |" if sweep else ""),
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
             + ("---|---|" if sweep else "")]
    for r in rows:
        cells = [f"{r['config']} {r['shape']}", f"{r['fwd']:.3f}",
                 f"{r['flops'] / r['fwd'] / 1e9:.0f}", f"{r['sdpa_fwd']:.3f}",
                 f"{r['fwd'] / r['sdpa_fwd']:.2f}", f"{r['bwd']:.3f}", f"{r['both']:.3f}",
                 f"{3.5 * r['flops'] / r['both'] / 1e9:.0f}", f"{r['sdpa_both']:.3f}",
                 f"{r['both'] / r['sdpa_both']:.2f}",
                 f"{r['fp32_fwd']:.3f} / {r['fp32_both']:.3f}" if "fp32_fwd" in r else ""]
        if sweep:
            cells += [f"{variant_text(r['best_fwd'][1])}, {r['best_fwd'][0]:.3f}",
                      f"{variant_text(r['best_bwd'][1])}, {r['best_bwd'][0]:.3f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return lines + [""]


# ----------------------------------------------------------------------------------
# kernels at andrea-120m shapes


def bench_kernels(reps):
    import torch
    import torch.nn.functional as F
    from microgpt.cuda_backend import CudaBackend

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    ops = CudaBackend()
    B, T, C, H, V = 16, 1024, 768, 12, 50304
    D, N = C // H, B * T
    rng = np.random.default_rng(0)

    def dev(*shape, scale=1.0):
        return ops.to_device((rng.standard_normal(shape) * scale).astype(np.float32))

    def tdev(*shape, scale=1.0, grad=False):
        return (torch.randn(*shape, device="cuda") * scale).requires_grad_(grad)

    x, w_qkv, qkv = dev(N, C), dev(C, 3 * C, scale=0.02), dev(B, T, 3 * C)
    w_o, proj = dev(C, C, scale=0.02), dev(N, C)
    q, k, v, y, lse = (
        dev(B, H, T, D),
        dev(B, H, T, D),
        dev(B, H, T, D),
        dev(B, H, T, D),
        dev(B, H, T),
    )
    dq, dk, dv = dev(B, H, T, D), dev(B, H, T, D), dev(B, H, T, D)
    delta = dev(B, H, T)
    merged, fc, fc_out = dev(B, T, C), dev(N, 4 * C), dev(N, 4 * C)
    w_fc, w_proj = dev(C, 4 * C, scale=0.02), dev(4 * C, C, scale=0.02)
    ln_w, ln_b, mean, rstd, ln_out = dev(C), dev(C), dev(N), dev(N), dev(N, C)
    logits, losses, targets = dev(N, V), dev(N), ops.to_device(rng.integers(0, V, N))
    wte, wpe, idx = (
        dev(V, C, scale=0.02),
        dev(T, C, scale=0.02),
        ops.to_device(rng.integers(0, V, (B, T))),
    )
    logits_lse = dev(N)
    ops.attention_forward(y, lse, q, k, v)  # realistic lse for the backward
    flat = 124_392_960  # andrea-120m's parameter count
    p, g, m = dev(flat, scale=0.02), dev(flat, scale=1e-3), dev(flat, scale=1e-3)
    vv, nsq = ops.zeros((flat,)), ops.zeros((1,))
    hparams = ops.to_device(np.array([1, 1e-4, 0.1, 0.05], np.float32))
    metrics_log = ops.zeros((1024, 3))
    kv = dev(B, T, 2 * C)

    tx, tw, tw_o = tdev(N, C), tdev(C, 3 * C, scale=0.02), tdev(C, C, scale=0.02)
    tq, tk, tv = (tdev(B, H, T, D, grad=True) for _ in range(3))
    tlogits, ttargets = tdev(N, V), torch.randint(0, V, (N,), device="cuda")
    tfc, tw_fc = tdev(N, 4 * C), tdev(C, 4 * C, scale=0.02)
    tln_w, tln_b = tdev(C), tdev(C)
    tsdpa = F.scaled_dot_product_attention(tq, tk, tv, is_causal=True)
    tdo = torch.randn_like(tsdpa)

    rows = [
        (
            "fused QKV GEMM 16384x768 @ 768x2304",
            lambda: ops.matmul(qkv.reshape(N, 3 * C), x, w_qkv),
            lambda: torch.mm(tx, tw),
            2 * N * C * 3 * C,
        ),
        (
            "split heads (B,T,3C) -> 3 x (B,H,T,D)",
            lambda: ops.split_heads_forward(q, k, v, qkv),
            None,
            0,
        ),
        (
            "attention forward, causal",
            lambda: ops.attention_forward(y, lse, q, k, v),
            lambda: F.scaled_dot_product_attention(tq, tk, tv, is_causal=True),
            2 * B * H * T * T * D,
        ),
        (
            "attention backward",
            lambda: ops.attention_backward(dq, dk, dv, delta, y, q, k, v, y, lse),
            lambda: torch.autograd.grad(tsdpa, (tq, tk, tv), tdo, retain_graph=True),
            5 * B * H * T * T * D,
        ),
        ("merge heads (B,H,T,D) -> (B,T,C)", lambda: ops.merge_heads_forward(merged, y), None, 0),
        (
            "W_O GEMM 16384x768 @ 768x768",
            lambda: ops.matmul(proj, merged.reshape(N, C), w_o),
            lambda: torch.mm(tx, tw_o),
            2 * N * C * C,
        ),
        (
            "layernorm forward",
            lambda: ops.layernorm_forward(ln_out, mean, rstd, x, ln_w, ln_b),
            lambda: F.layer_norm(tx, (C,), tln_w, tln_b),
            0,
        ),
        ("residual add (B, T, C)", lambda: ops.residual_forward(proj, merged.reshape(N, C), x),
         lambda: tx + tx, 0),
        ("residual add + layernorm forward",
         lambda: ops.residual_layernorm_forward(proj, ln_out, mean, rstd, merged.reshape(N, C),
                                                x, ln_w, ln_b), None, 0),
        (
            "MLP up GEMM 16384x768 @ 768x3072, and GELU",
            lambda: ops.matmul_gelu_forward(fc_out, fc, x, w_fc),
            lambda: F.gelu(torch.mm(tx, tw_fc), approximate="tanh"),
            2 * N * C * 4 * C,
        ),
        (
            "gelu forward (N, 4C)",
            lambda: ops.gelu_forward(fc_out, fc),
            lambda: F.gelu(tfc, approximate="tanh"),
            0,
        ),
        ("encoder forward", lambda: ops.encoder_forward(merged, idx, wte, wpe), None, 0),
        (
            "crossentropy forward (16384 x 50304)",
            lambda: ops.crossentropy_forward(losses, logits_lse, logits, targets),
            lambda: F.cross_entropy(tlogits, ttargets),
            0,
        ),
        (
            "LM head GEMM 16384x768 @ (50304x768)^T",
            lambda: ops.matmul(logits, x, wte, transpose_b=True),
            None,
            2 * N * C * V,
        ),
        ("global grad norm (124M)", lambda: ops.global_norm_squared(nsq, g), None, 0),
        ("AdamW schedule (lr, bias corrections)",
         lambda: ops.adamw_schedule(hparams, lr=1e-4, warmup_steps=10, total_steps=1000,
                                    min_lr_ratio=0.1, beta1=0.9, beta2=0.95), None, 0),
        ("AdamW update (124M)",
         lambda: ops.adamw_update(p, g, m, vv, nsq, hparams, weight_decay=0.1,
                                  n_decay=flat // 2, max_norm=1.0, beta1=0.9, beta2=0.95,
                                  eps=1e-8), None, 0),
        ("record step metrics (16384 losses)",
         lambda: ops.record_step(metrics_log, losses, nsq, hparams), None, 0),
        # generation: one new position of a batch of 16 against a full 1024-position cache
        ("KV cache write (16 x 1 position)",
         lambda: ops.kv_cache_write(kv, qkv[:, :1], T - 1), None, 0),
        ("attention of 1 position against the cache (16 x 1024)",
         lambda: ops.attention_cached_forward(merged[:, :1], qkv[:, :1], kv, T - 1, H), None, 0),
    ]
    # the backward passes (microgpt's only; PyTorch's GEMM twins for scale)
    dw_qkv, ln_dw, ln_db = dev(C, 3 * C), dev(C), dev(C)
    dwte, dwpe, tdy = dev(V, C), dev(T, C), tdev(N, 3 * C)
    rows += [
        ("QKV GEMM backward dX = dY @ W^T", lambda: ops.matmul(x, qkv.reshape(N, 3 * C), w_qkv,
                                                               transpose_b=True),
         lambda: torch.mm(tdy, tw.T), 2 * N * C * 3 * C),
        ("QKV GEMM backward dW += X^T @ dY",
         lambda: ops.matmul(dw_qkv, x, qkv.reshape(N, 3 * C), transpose_a=True, accumulate=True),
         lambda: torch.mm(tx.T, tdy), 2 * N * C * 3 * C),
        ("split heads backward", lambda: ops.split_heads_backward(qkv, dq, dk, dv), None, 0),
        ("merge heads backward", lambda: ops.merge_heads_backward(dq, merged), None, 0),
        ("layernorm backward", lambda: ops.layernorm_backward(proj, ln_dw, ln_db, ln_out, x, ln_w,
                                                              mean, rstd), None, 0),
        ("gelu backward, in place", lambda: ops.gelu_backward(fc_out, fc_out, fc), None, 0),
        ("MLP down GEMM backward dX = dY @ W^T, through GELU",
         lambda: ops.matmul_gelu_backward(fc_out, x, w_proj, fc), None, 2 * N * C * 4 * C),
        ("encoder backward", lambda: ops.encoder_backward(dwte, dwpe, merged, idx), None, 0),
        ("crossentropy forward + backward, in place over the logits",
         lambda: ops.crossentropy_forward_backward(losses, logits, targets, 1.0 / N), None, 0),
    ]
    out = []
    for name, ours, theirs, flops in rows:
        ms = cuda_time(ours, reps)
        ref_ms = torch_time(theirs, reps) if theirs else None
        out.append((name, ms, ref_ms, flops))
        print(
            f"  {name:45s} {ms:9.3f} ms" + (f"   torch {ref_ms:8.3f} ms" if ref_ms else ""),
            flush=True,
        )
    return out


# ----------------------------------------------------------------------------------
# fused kernels against the launches they replace

def bench_fused(reps, shape=(16, 1024, 768, 50304), n_params=124_392_960):
    """(name, ms, the unfused launches' ms or None, bytes each must move) at shape (B, T,
    C, V) and n_params, andrea-120m's (heads of 64). bf16 arrays are uint16 device
    arrays. The bf16 head copies and AdamW's bf16 matrices replace no launch: beside them,
    the same launch in float32 (in the unfused column)."""
    from numba import cuda

    from microgpt.kernels import adamw, crossentropy, elementwise, gemm, heads, layernorm

    import ml_dtypes

    B, T, C, V = shape
    N = B * T
    rng = np.random.default_rng(0)

    def dev(*dims, scale=1.0, bf16=False):
        """Random rows on the device: 256 drawn rows repeated (drawing all 824M logits
        would take the host longer than the whole benchmark)."""
        block = rng.standard_normal((min(dims[0], 256),) + dims[1:], dtype=np.float32) * scale
        if bf16:
            block = block.astype(ml_dtypes.bfloat16).view(np.uint16)
        return cuda.to_device(np.resize(block, dims))

    def dev_bf16(*dims, scale=1.0):
        return dev(*dims, scale=scale, bf16=True)

    a, b, resid, ln_out, dln, dresid = (dev(N, C) for _ in range(6))
    ln_out16, dln16, dresid16 = dev_bf16(N, C), dev_bf16(N, C), dev_bf16(N, C)
    w, bias, mean, rstd, dw, db = dev(C), dev(C), dev(N), dev(N), dev(C), dev(C)
    logits, losses, lse = dev(N, V, scale=2.0), dev(N), dev(N)
    logits16 = dev_bf16(N, V, scale=2.0)
    targets = cuda.to_device(rng.integers(0, V, N).astype(np.int32))
    fc, fc_out, fc16, fc_out16 = (dev(N, 4 * C), dev(N, 4 * C), dev_bf16(N, 4 * C),
                                  dev_bf16(N, 4 * C))
    w_fc16, w_proj16 = dev_bf16(C, 4 * C, scale=0.02), dev_bf16(4 * C, C, scale=0.02)
    per_head = (B, C // 64, T, 64)
    qkv, qkv16 = dev(B, T, 3 * C), dev_bf16(B, T, 3 * C)
    q, k, v = (dev(*per_head) for _ in range(3))
    q16, k16, v16 = (dev_bf16(*per_head) for _ in range(3))
    merged, merged16 = dev(B, T, C), dev_bf16(B, T, C)
    # every parameter but the LayerNorm vectors (4 per layer and ln_f's 2, at 12 layers) is a
    # matrix, decayed and copied to bf16
    n_decay = n_params - 50 * C
    param, grad, m_flat = (dev(n_params, scale=0.02) for _ in range(3))
    v_flat = cuda.to_device(np.full(n_params, 1e-4, np.float32))
    norm_squared = cuda.to_device(np.ones(1, np.float32))
    hparams = cuda.to_device(np.array([1, 1e-4, 0.1, 0.05], np.float32))
    param16 = cuda.to_device(np.zeros(n_decay, np.uint16))
    f32, bf16 = 4, 2
    nc, nv, nf = N * C, N * V, N * 4 * C

    def adamw_update(**bf16_copy):
        adamw.adamw_update(param, grad, m_flat, v_flat, norm_squared, hparams, weight_decay=0.1,
                           n_decay=n_decay, max_norm=1.0, beta1=0.9, beta2=0.95, eps=1e-8,
                           **bf16_copy)

    def residual_pair():
        elementwise.residual_forward(resid, a, b)
        layernorm.layernorm_forward(ln_out, mean, rstd, resid, w, bias)

    def crossentropy_pair():
        crossentropy.crossentropy_forward(losses, lse, logits, targets)
        crossentropy.crossentropy_backward(logits, logits, lse, targets, 1.0 / N)

    rows = [
        ("residual + layernorm forward, float32 out",
         lambda: layernorm.residual_layernorm_forward(resid, ln_out, mean, rstd, a, b, w, bias),
         residual_pair, nc * 4 * f32),
        ("residual + layernorm forward, bf16 out",
         lambda: layernorm.residual_layernorm_forward(resid, ln_out16, mean, rstd, a, b, w,
                                                      bias),
         residual_pair, nc * (3 * f32 + bf16)),
        ("layernorm backward, float32 dout",
         lambda: layernorm.layernorm_backward(dresid, dw, db, dln, resid, w, mean, rstd),
         None, nc * 4 * f32),
        ("layernorm backward, bf16 dout + bf16 copy of dinp",
         lambda: layernorm.layernorm_backward(dresid, dw, db, dln16, resid, w, mean, rstd,
                                              dinp_copy=dresid16),
         None, nc * (3 * f32 + 2 * bf16)),
        ("crossentropy forward + backward, float32 logits",
         lambda: crossentropy.crossentropy_forward_backward(losses, logits, targets, 1.0 / N),
         crossentropy_pair, nv * 2 * f32),
        ("crossentropy forward + backward, bf16 logits",
         lambda: crossentropy.crossentropy_forward_backward(losses, logits16, targets, 1.0 / N),
         crossentropy_pair, nv * 2 * bf16),
        ("gelu forward, float32 -> float32", lambda: elementwise.gelu_forward(fc_out, fc), None,
         nf * 2 * f32),
        ("gelu forward, float32 -> bf16", lambda: elementwise.gelu_forward(fc_out16, fc), None,
         nf * (f32 + bf16)),
        ("gelu forward, bf16 -> bf16", lambda: elementwise.gelu_forward(fc_out16, fc16), None,
         nf * 2 * bf16),
        ("gelu backward in place, float32", lambda: elementwise.gelu_backward(fc_out, fc_out, fc),
         None, nf * 3 * f32),
        ("gelu backward in place, bf16",
         lambda: elementwise.gelu_backward(fc_out16, fc_out16, fc16), None, nf * 3 * bf16),
        ("MLP up GEMM, GELU in its epilogue (bf16)",
         lambda: gemm.matmul_gelu_forward(fc_out16, fc16, ln_out16, w_fc16, fused=True),
         lambda: gemm.matmul_gelu_forward(fc_out16, fc16, ln_out16, w_fc16, fused=False),
         (nc + 4 * C * C + 2 * nf) * bf16),
        ("MLP down dX GEMM, GELU backward in its epilogue (bf16)",
         lambda: gemm.matmul_gelu_backward(fc_out16, dln16, w_proj16, fc16, fused=True),
         lambda: gemm.matmul_gelu_backward(fc_out16, dln16, w_proj16, fc16, fused=False),
         (nc + 4 * C * C + 2 * nf) * bf16),
        ("split heads, float32 qkv -> bf16 q, k, v",
         lambda: heads.split_heads_forward(q16, k16, v16, qkv),
         lambda: heads.split_heads_forward(q, k, v, qkv), 3 * nc * (f32 + bf16)),
        ("split heads, bf16 -> bf16", lambda: heads.split_heads_forward(q16, k16, v16, qkv16),
         lambda: heads.split_heads_forward(q, k, v, qkv), 3 * nc * 2 * bf16),
        ("merge heads, bf16 -> bf16", lambda: heads.merge_heads_forward(merged16, q16),
         lambda: heads.merge_heads_forward(merged, q), nc * 2 * bf16),
        ("merge heads backward, float32 -> bf16", lambda: heads.merge_heads_backward(q16, merged),
         lambda: heads.merge_heads_backward(q, merged), nc * (f32 + bf16)),
        ("split heads backward, bf16 -> bf16",
         lambda: heads.split_heads_backward(qkv16, q16, k16, v16),
         lambda: heads.split_heads_backward(qkv, q, k, v), 3 * nc * 2 * bf16),
        ("AdamW update + bf16 matrices", lambda: adamw_update(param_bf16=param16), adamw_update,
         n_params * 7 * f32 + n_decay * bf16),
    ]
    out = []
    for name, fused, unfused, nbytes in rows:
        ms = cuda_time(fused, reps)
        pair_ms = cuda_time(unfused, reps) if unfused else None
        out.append((name, ms, pair_ms, nbytes))
        print(f"  {name:52s} {ms:8.3f} ms  {nbytes / ms / 1e6:6.0f} GB/s"
              + (f"   unfused {pair_ms:8.3f} ms" if pair_ms else ""), flush=True)
    return out


def fused_report(rows):
    lines = ["## Fused kernels of mixed precision at andrea-120m shapes "
             "(N = B·T = 16384 rows, C 768, V 50304)", "",
             "GB/s: the bytes the kernel must read and write once each, over its time.", "",
             "| kernel | ms | GB/s | the unfused launches it replaces (for the bf16 head copies "
             "and AdamW, the same launch in float32), ms | unfused / fused |",
             "|---|---:|---:|---:|---:|"]
    for name, ms, pair_ms, nbytes in rows:
        pair = f"{pair_ms:.3f} | {pair_ms / ms:.2f}" if pair_ms else "n/a | "
        lines.append(f"| {name} | {ms:.3f} | {nbytes / ms / 1e6:.0f} | {pair} |")
    return lines + [""]


# ----------------------------------------------------------------------------------
# whole training steps


def torch_gpt(cfg):
    """A PyTorch GPT of the same architecture: pre-LN, bias-free linears, tied head."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            C = cfg.d_model
            self.ln_1, self.ln_2 = nn.LayerNorm(C), nn.LayerNorm(C)
            self.w_qkv = nn.Linear(C, 3 * C, bias=False)
            self.w_o = nn.Linear(C, C, bias=False)
            self.w_fc = nn.Linear(C, 4 * C, bias=False)
            self.w_proj = nn.Linear(4 * C, C, bias=False)

        def forward(self, x):
            B, T, C = x.shape
            q, k, v = self.w_qkv(self.ln_1(x)).split(C, dim=2)
            q, k, v = (t.view(B, T, cfg.n_head, -1).transpose(1, 2) for t in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.w_o(y.transpose(1, 2).reshape(B, T, C))
            return x + self.w_proj(F.gelu(self.w_fc(self.ln_2(x)), approximate="tanh"))

    class TorchGPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(cfg.vocab_size, cfg.d_model)
            self.wpe = nn.Embedding(cfg.context, cfg.d_model)
            self.h = nn.ModuleList(Block() for _ in range(cfg.n_layer))
            self.ln_f = nn.LayerNorm(cfg.d_model)

        def forward(self, idx, targets):
            x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
            for block in self.h:
                x = block(x)
            logits = self.ln_f(x) @ self.wte.weight.T
            return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))

    return TorchGPT().cuda()


def bench_steps(reps, compile_torch=True, fp32=True):
    import torch
    from numba import cuda
    from microgpt import GPT, get_config
    from microgpt.optim import AdamW, AdamWConfig
    from microgpt.step import Step

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    out = []
    for name, B, T in (("andrea-12m", 64, 256), ("andrea-120m", 16, 1024)):
        cfg = get_config(name)
        rng = np.random.default_rng(0)
        idx = rng.integers(0, cfg.vocab_size, (B, T)).astype(np.int32)
        targets = rng.integers(0, cfg.vocab_size, (B, T)).astype(np.int32)

        row = {}
        runs = ([("fp32", True)] if fp32 else []) + [("bf16", False), ("bf16", True)]
        for precision, graph in runs:
            free_before, total = cuda.current_context().get_memory_info()
            model = GPT(cfg, backend="cuda", precision=precision)
            step = Step(model, AdamW(model, AdamWConfig(total_steps=10**6)), B, T, graph=graph)
            for _ in range(2):          # compile; then capture
                step.run(idx, targets)
            step.metrics()
            # the host's cost of a step, the device idle: what a graph saves
            host = []
            for _ in range(min(reps, 5)):
                model.backend.synchronize()
                t0 = time.perf_counter()
                step.run(idx, targets)
                host.append(time.perf_counter() - t0)
            step.metrics()
            t0 = time.perf_counter()
            for _ in range(reps):
                step.run(idx, targets)
            step.metrics()              # the one read back, which waits for the device
            ours_s = (time.perf_counter() - t0) / reps
            free_after, _ = cuda.current_context().get_memory_info()
            label = f"ours_{precision}_{'graph' if graph else 'eager'}"
            row[label + "_tok_s"] = B * T / ours_s
            row[label + "_host_ms"] = 1e3 * float(np.median(host))
            row[f"ours_{precision}_gib"] = (free_before - free_after) / 2**30
            model = step = None         # free the device memory before the next runs
        row.update(config=name, B=B, T=T)
        t_idx, t_targets = (
            torch.from_numpy(idx).long().cuda(),
            torch.from_numpy(targets).long().cuda(),
        )
        torch_runs = ([("torch_fp32", False, False)] if fp32 else []) + [
            ("torch_bf16", True, False)]
        if compile_torch:
            torch_runs.append(("torch_compile", True, True))
        for label, autocast, compiled in torch_runs:
            tmodel = torch_gpt(cfg)
            forward = torch.compile(tmodel) if compiled else tmodel
            topt = torch.optim.AdamW(tmodel.parameters(), lr=1e-4, betas=(0.9, 0.95), fused=True)
            torch.cuda.reset_peak_memory_stats()

            def torch_step():
                with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
                    loss = forward(t_idx, t_targets)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(tmodel.parameters(), 1.0)
                topt.step()
                topt.zero_grad(set_to_none=True)
                return loss.item()

            try:
                for _ in range(3 if compiled else 1):     # compiled: its warm-up recompiles
                    torch_step()
            except Exception as e:      # torch.compile needs a toolchain the machine may lack
                print(f"   {label} did not run: {type(e).__name__}: {e}"[:300], flush=True)
                row[label + "_tok_s"] = row[label + "_gib"] = None
                continue
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(reps):
                torch_step()
            torch.cuda.synchronize()
            row[label + "_tok_s"] = B * T * reps / (time.perf_counter() - t0)
            row[label + "_gib"] = torch.cuda.max_memory_allocated() / 2**30
            tmodel = forward = topt = None
            torch.cuda.empty_cache()
        out.append(row)
        print("  ", row, flush=True)
    return out


# ----------------------------------------------------------------------------------
# generation


def full_window_generate(model, prompt_ids, n_tokens, rng):
    """The generation microgpt.generate replaced, for the "before" column: every token runs
    the model over one (1, context) window, zero-padded, and copies all its logits back."""
    from microgpt.generate import pick_token

    context = model.config.context
    ids, window = list(prompt_ids), np.zeros((1, context), np.int32)
    for _ in range(n_tokens):
        recent = ids[-context:]
        window[0, :len(recent)] = recent
        logits = model.forward(window)[0, len(recent) - 1]
        ids.append(pick_token(logits, temperature=0.8, top_k=40, rng=rng))
    return ids[len(prompt_ids):]


def bench_generate(device, tokens, before_tokens, prompt=16):
    """tokens/s of generate() (the prefill of a prompt included) and of the full-window
    loop, after a warm-up that compiles every kernel both launch; sample's defaults
    (temperature 0.8, top-k 40), random parameters (the speed does not depend on them)."""
    from microgpt import GPT, get_config
    from microgpt.generate import generate

    rows = []
    for name in ("andrea-12m", "andrea-120m"):
        cfg = get_config(name)
        model = GPT(cfg, backend="cuda" if device == "cuda" else "numpy")
        rng = np.random.default_rng(0)
        prompt_ids = list(rng.integers(0, cfg.vocab_size, prompt))

        def after(n):
            generate(model, prompt_ids, n, temperature=0.8, top_k=40, rng=rng,
                     vocab_limit=cfg.vocab_size)

        def before(n):
            full_window_generate(model, prompt_ids, n, rng)

        row = dict(config=name, prompt=prompt, tokens=tokens, before_tokens=before_tokens)
        for label, run, n in (("after", after, tokens), ("before", before, before_tokens)):
            run(2)
            t0 = time.perf_counter()
            run(n)
            row[label] = n / (time.perf_counter() - t0)
        rows.append(row)
        print(f"  {name:12s} KV cache {row['after']:9.1f} tok/s   full window "
              f"{row['before']:9.2f} tok/s   x{row['after'] / row['before']:.1f}", flush=True)
    return rows


def generate_report(rows, device):
    lines = [f"## Generation tokens/s ({'H200' if device == 'cuda' else 'CPU, NumPy backend'})",
             "",
             f"A prompt of {rows[0]['prompt']} random tokens, temperature 0.8, top-k 40, batch 1; "
             "the time of the whole call, prefill included, after a warm-up.",
             "",
             "| config | KV cache tok/s (tokens) | full window tok/s (tokens) | speed-up |",
             "|---|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['config']} | {r['after']:,.1f} ({r['tokens']}) | "
                     f"{r['before']:,.2f} ({r['before_tokens']}) | "
                     f"{r['after'] / r['before']:,.1f} |")
    return lines + [""]


# ----------------------------------------------------------------------------------


def versions(device="cuda"):
    import numba

    text = (f"python {platform.python_version()}, numpy {np.__version__}, "
            f"numba {numba.__version__}")
    if device == "cpu":
        return f"CPU {platform.machine()}, {os.cpu_count()} cores; {text}"
    from numba import cuda

    dev = cuda.get_current_device()
    text = (f"GPU {dev.name.decode() if isinstance(dev.name, bytes) else dev.name}, "
            f"cc {dev.compute_capability}; {text}, "
            f"numba-cuda {importlib.metadata.version('numba-cuda')}")
    try:
        import torch
    except ImportError:     # the generate section runs without it
        return text
    return f"{text}, torch {torch.__version__} (CUDA {torch.version.cuda})"


def write_report(path, gemm, kernels, steps, command, sweep=False, attention=(),
                 attention_sweep=False, fused=(), generation=(), device="cuda",
                 gemm_captured=False):
    lines = [
        f"# Benchmark results ({datetime.date.today().isoformat()})",
        "",
        f"Machine: {versions(device)}; {platform.node()}",
        "",
        f"Command: `{command}`",
        "",
        "Same-run ratios are what count; absolute figures move 10-30% between runs.",
        "",
    ]
    if gemm:
        lines += gemm_report(gemm, sweep, gemm_captured)
    if attention:
        lines += attention_report(attention, attention_sweep)
    if fused:
        lines += fused_report(fused)
    if generation:
        lines += generate_report(generation, device)
    if kernels:
        lines += [
            "## Kernels at andrea-120m shapes (B 16, T 1024, C 768, 12 heads of 64, V 50304)",
            "",
            "| op | microgpt ms | TFLOP/s | PyTorch fp32 ms | PyTorch / microgpt |",
            "|---|---:|---:|---:|---:|",
        ]
        for name, ms, ref_ms, flops in kernels:
            tflops = f"{flops / ms / 1e9:.1f}" if flops else ""
            ref = f"{ref_ms:.3f}" if ref_ms else "n/a"
            ratio = f"{ref_ms / ms:.2f}" if ref_ms else ""
            lines.append(f"| {name} | {ms:.3f} | {tflops} | {ref} | {ratio} |")
        lines.append("")
    if steps:
        def cell(value, fmt):
            return "n/a" if value is None else format(value, fmt)
        lines += [
            "## Whole training step (forward + backward + AdamW)",
            "",
            "tokens/s (peak device memory, GiB). microgpt's step is microgpt.step.Step replayed "
            "as one CUDA graph; PyTorch's is the same architecture in float32 (TF32 off), "
            "bf16 autocast (eager), and bf16 autocast under torch.compile, each with fused "
            "AdamW and gradient clipping.",
            "",
            "| config | B x T | microgpt fp32 | microgpt bf16 | PyTorch fp32 | PyTorch bf16 | "
            "torch.compile bf16 | bf16 / PyTorch bf16 | bf16 / torch.compile |",
            "|---|---|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for r in steps:
            cells = [r["config"], f"{r['B']} x {r['T']}"]
            for tok_s, gib in (("ours_fp32_graph_tok_s", "ours_fp32_gib"),
                               ("ours_bf16_graph_tok_s", "ours_bf16_gib"),
                               ("torch_fp32_tok_s", "torch_fp32_gib"),
                               ("torch_bf16_tok_s", "torch_bf16_gib"),
                               ("torch_compile_tok_s", "torch_compile_gib")):
                cells.append(f"{cell(r.get(tok_s), ',.0f')} ({cell(r.get(gib), '.1f')})")
            ours = r["ours_bf16_graph_tok_s"]
            for ref in ("torch_bf16_tok_s", "torch_compile_tok_s"):
                cells.append(cell(r.get(ref) and ours / r[ref], ".2f"))
            lines.append("| " + " | ".join(cells) + " |")
        lines += [
            "",
            "microgpt's bf16 step launched op by op (eager) and replayed as one CUDA graph; "
            "host ms: the Python side of one step with the device idle.",
            "",
            "| config | eager tok/s | eager host ms | graph tok/s | graph host ms |",
            "|---|---:|---:|---:|---:|",
        ]
        for r in steps:
            lines.append(f"| {r['config']} | {r['ours_bf16_eager_tok_s']:,.0f} | "
                         f"{r['ours_bf16_eager_host_ms']:.2f} | "
                         f"{r['ours_bf16_graph_tok_s']:,.0f} | "
                         f"{r['ours_bf16_graph_host_ms']:.2f} |")
        lines.append("")
    with open(path, "w") as f:
        f.write("\n".join(lines))
    print(f"wrote {path}")


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--only", choices=["gemm", "attention", "kernels", "steps", "fused",
                                           "generate"],
                        help="run one section")
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda",
                        help="cpu: the generate section on the NumPy backend (default: cuda)")
    parser.add_argument("--gen-tokens", type=int, default=200,
                        help="tokens generated with the KV cache (default: 200)")
    parser.add_argument("--gen-before-tokens", type=int, default=20,
                        help="tokens generated the full-window way (default: 20)")
    parser.add_argument("--gemm-sweep", action="store_true",
                        help="time every tile and split-K candidate of each GEMM")
    parser.add_argument("--gemm-captured", action="store_true",
                        help=f"time microgpt's GEMM launches captured in a CUDA graph, "
                             f"{CAPTURED_LAUNCHES} a replay, as the step runs them (torch.mm "
                             "stays eager)")
    parser.add_argument("--attention-sweep", action="store_true",
                        help="time the tile candidates of each flash attention pass")
    parser.add_argument("--no-torch-compile", action="store_true",
                        help="steps: leave out torch.compile (its compilation takes ~1 minute)")
    parser.add_argument("--bf16-only", action="store_true",
                        help="steps: leave out the float32 steps (microgpt's and PyTorch's)")
    parser.add_argument("--reps", type=int, default=10, help="timed repetitions per measurement")
    parser.add_argument("--out", default="bench/RESULTS.md", help="markdown file to write")
    args = parser.parse_args(argv)
    from microgpt.backend import cuda_available

    command = "python tools/bench.py " + " ".join(argv or sys.argv[1:])
    if args.device == "cpu":
        if args.only != "generate":
            parser.error("--device cpu runs the generate section only: pass --only generate")
        write_report(args.out, [], [], [], command, device="cpu",
                     generation=bench_generate("cpu", args.gen_tokens, args.gen_before_tokens))
        return 0
    if not cuda_available():
        print("bench.py: no CUDA GPU found; the benchmarks need one (and PyTorch)", file=sys.stderr)
        return 2
    gemm = (bench_gemm(args.reps, args.gemm_sweep, args.gemm_captured)
            if args.only in (None, "gemm") else [])
    attention = (bench_flash_attention(args.reps, args.attention_sweep)
                 if args.only in (None, "attention") else [])
    kernels = bench_kernels(args.reps) if args.only in (None, "kernels") else []
    steps = (bench_steps(max(2, args.reps // 2), not args.no_torch_compile, not args.bf16_only)
             if args.only in (None, "steps") else [])
    fused = bench_fused(args.reps) if args.only in (None, "fused") else []
    generation = (bench_generate("cuda", args.gen_tokens, args.gen_before_tokens)
                  if args.only in (None, "generate") else [])
    write_report(args.out, gemm, kernels, steps, command, args.gemm_sweep, attention,
                 args.attention_sweep, fused, generation, gemm_captured=args.gemm_captured)
    return 0


if __name__ == "__main__":
    sys.exit(main())
