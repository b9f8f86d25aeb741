"""The memory-bound kernels of the bf16 step against the device's copy rate: each launch
captured in a CUDA graph, 20 a replay, the fastest of --reps replays (tools/bench.py's
captured_time); bytes are what the launch must move (each array read or written once),
the copy's a device-to-device memcpy of 1 GiB (read + write). One markdown table. The
kernels come from the trainer's kernel cache ($MICROGPT_CACHE_DIR/kernels): a run with
--reps 1 beside other work fills it for a quiet one.

    python bw.py --geometries andrea-120m gpt2-xl --only global_norm adamw
    python bw.py --geometries andrea-12m andrea-120m --only crossentropy layernorm_backward
"""
import argparse
import sys
from pathlib import Path

import numpy as np
from numba import cuda

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tools"))
from benchmarks.timing import captured_time            # noqa: E402
from microgpt.cuda_backend import CudaBackend           # noqa: E402
from microgpt.data import default_cache_dir             # noqa: E402
from microgpt.kernels import cache as kernel_cache      # noqa: E402
from microgpt.kernels import adamw, crossentropy, elementwise, layernorm  # noqa: E402

# (N token rows, C, parameters, vocabulary) of the bench's steps
GEOMETRIES = {"andrea-12m": (16384, 384, 12_297_984, 4096),
              "andrea-120m": (16384, 768, 124_392_960, 50304),
              "gpt2-medium": (16384, 1024, 354_650_112, 50304),
              "gpt2-xl": (8192, 1600, 1_556_995_200, 50304)}
HEAD_ROWS = 8192


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--geometries", nargs="+", default=["andrea-120m"])
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--only", nargs="+", default=None,
                        help="measure only the kernels whose names contain one of these")
    args = parser.parse_args()
    kernel_cache.use(default_cache_dir() / "kernels")
    ops = CudaBackend()
    rng = np.random.default_rng(0)

    def values(rows, cols):
        """(rows, cols) float32 normal values: 64 random rows tiled (the host's generator
        would take seconds a billion)."""
        block = rng.standard_normal((min(rows, 64), cols), dtype=np.float32)
        return np.tile(block, (-(-rows // len(block)), 1))[:rows]

    def f32(*shape):
        return cuda.to_device(values(shape[0], shape[1] if len(shape) > 1 else 1)
                              .reshape(shape))

    def bf16(*shape):
        return cuda.to_device((values(*shape).view(np.uint32) >> 16).astype(np.uint16))

    src, dst = cuda.device_array(2**28, np.float32), cuda.device_array(2**28, np.float32)
    ms = captured_time(lambda s: dst.copy_to_device(src, stream=s), args.reps, ops)
    copy_rate = 2 * 2**30 / ms / 1e6      # bytes a ms / 1e6: GB/s
    print(f"| kernel | geometry | ms | GB/s | of the copy's {copy_rate:,.0f} GB/s |\n"
          "|---|---|--:|--:|--:|", flush=True)

    def row(name, geometry, ms, rate):      # as it is measured: a timeout keeps the rest
        print(f"| {name} | {geometry} | {ms:.4f} | {rate:,.0f} | {rate / copy_rate:.0%} |",
              flush=True)
    row("device-to-device copy, 1 GiB", "-", ms, copy_rate)
    for geometry in args.geometries:
        N, C, P, V = GEOMETRIES[geometry]
        x, a, b, dinp = f32(N, C), f32(N, C), f32(N, C), f32(N, C)
        w, bias, dw, db = f32(C), f32(C), f32(C), f32(C)
        mean, rstd = f32(N), cuda.to_device(np.ones(N, np.float32))
        out, dout, copy = bf16(N, C), bf16(N, C), bf16(N, C)
        dln = f32(N, C)         # the step's dout: the dX GEMMs write float32
        cases = [
            ("residual_layernorm_forward (out bf16)", 14 * N * C,
             lambda s: layernorm.residual_layernorm_forward(x, out, mean, rstd, a, b, w, bias,
                                                            stream=s)),
            ("layernorm_backward (the step's: dout float32, dinp copy bf16)", 18 * N * C,
             lambda s: layernorm.layernorm_backward(dinp, dw, db, dln, x, w, mean, rstd,
                                                    dinp_copy=copy, stream=s)),
            ("layernorm_backward + out recomputed (bf16)", 20 * N * C,
             lambda s: layernorm.layernorm_backward(dinp, dw, db, dln, x, w, mean, rstd,
                                                    dinp_copy=copy, out=out, bias=bias,
                                                    stream=s)),
        ]
        fc, dfc, act = bf16(N, 4 * C), bf16(N, 4 * C), bf16(N, 4 * C)
        cases += [
            ("gelu_backward in place (bf16)", 6 * N * 4 * C,
             lambda s: elementwise.gelu_backward(dfc, dfc, fc, stream=s)),
            ("gelu_backward in place + act (bf16)", 8 * N * 4 * C,
             lambda s: elementwise.gelu_backward(dfc, dfc, fc, act, stream=s)),
            ("gelu_backward in place + act, 256 threads", 8 * N * 4 * C,
             lambda s: elementwise.gelu_backward(dfc, dfc, fc, act, block=256, stream=s)),
            ("gelu_forward (bf16)", 4 * N * 4 * C,
             lambda s: elementwise.gelu_forward(act, fc, stream=s)),
        ]
        R = min(N, HEAD_ROWS)
        logits, losses = bf16(R, V), f32(R)
        targets = cuda.to_device(rng.integers(0, V, R).astype(np.int32))
        cases.append((f"crossentropy_forward_backward ({R} x {V} bf16)", 4 * R * V,
                      lambda s: crossentropy.crossentropy_forward_backward(
                          losses, logits, targets, 1.0 / N, stream=s)))
        # the update's arithmetic does not depend on the values: zeros (v 0: eps alone)
        p, g, m, v = (ops.zeros((P,)) for _ in range(4))
        p16 = ops.zeros((P,), np.uint16)
        norm, hp = cuda.to_device(np.ones(1, np.float32)), cuda.to_device(
            np.array([1, 1e-4, 0.1, 0.001], np.float32))
        cases += [
            ("adamw_update (+ bf16 copy)", 30 * P,
             lambda s: adamw.adamw_update(p, g, m, v, norm, hp, weight_decay=0.1, n_decay=P,
                                          max_norm=1.0, beta1=0.9, beta2=0.95, eps=1e-8,
                                          param_bf16=p16, stream=s)),
            ("global_norm_squared", 4 * P, lambda s: adamw.global_norm_squared(norm, g,
                                                                                 stream=s)),
        ]
        sweep = []
        # last: the launch's shape, swept (threads a block, rows a block; the default 128
        # and 64)
        for block, rows_per_block in [(256, 128), (256, 64), (64, 32), (128, 32), (128, 128),
                                      (256, 256), (256, 512), (64, 16), (32, 32)]:
            sweep.append((f"layernorm_backward (the step's), {block} threads, "
                          f"{rows_per_block} rows", 18 * N * C,
                          lambda s, block=block, r=rows_per_block: layernorm.layernorm_backward(
                              dinp, dw, db, dln, x, w, mean, rstd, dinp_copy=copy, block=block,
                              rows_per_block=r, stream=s)))
        for block in (32, 64, 128, 256, 512):
            sweep.append((f"crossentropy_forward_backward ({R} x {V} bf16), {block} threads",
                          4 * R * V,
                          lambda s, block=block: crossentropy.crossentropy_forward_backward(
                              losses, logits, targets, 1.0 / N, block=block, stream=s)))
        for block in (128, 64):
            sweep.append((f"residual_layernorm_forward, {block} threads", 14 * N * C,
                          lambda s, block=block: layernorm.residual_layernorm_forward(
                              x, out, mean, rstd, a, b, w, bias, block=block, stream=s)))
        for name, nbytes, fn in cases + sweep:
            if args.only and not any(word in name for word in args.only):
                continue
            ms = captured_time(fn, args.reps, ops)
            row(name, geometry, ms, nbytes / ms / 1e6)
        del x, a, b, dinp, out, dout, dln, copy, fc, dfc, act, logits, p, g, m, v, p16


if __name__ == "__main__":
    main()
