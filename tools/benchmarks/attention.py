"""Flash attention (bf16, tensor cores) beside SDPA in bf16, causal."""

import numpy as np

from .timing import cuda_time, torch_time

ATTENTION_SHAPES = (("andrea-120m", 16, 12, 1024, 64), ("andrea-12m", 64, 12, 256, 32),
                    ("head_dim 72", 16, 12, 1024, 72))


def attention_candidates(D):
    """(forward tiles, (dq tile, dk/dv tile) pairs) the sweep times, defaults first; each
    backward pass varied alone (the two are timed together). Beside the tile shapes: 32
    rows per warp, launch bounds for 2-4 blocks per SM, and three stages."""
    from microgpt.kernels.attention import flash as fa
    from microgpt.kernels.attention.flash import FlashTile as F

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
    from microgpt.kernels.attention import flash as fa

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
    """The float32 kernels (kernels/attention/fp32.py): forward, and forward + backward."""
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
             "microgpt: kernels/attention/flash.py with its default tiles; fwd+bwd = forward, "
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
