"""Issue 32's pieces at andrea-120m, captured (20 launches a graph, best of reps):
the column sums (bias_backward) of the three dY shapes against torch's sum(0) and a
device copy (the memory's rate), the LayerNorm backward (which shares their first pass),
and with --gemm each biased forward GEMM against its plain twin; --sweep times the new
column-sum kernel's variants.
usage: python micro.py [--gemm] [--sweep] | --ncu-sums | --ncu-gemm (from the tree to measure)"""
import sys
import numpy as np
import ml_dtypes
from numba import cuda
sys.path.insert(0, "tools")
from benchmarks.timing import captured_time, torch_time
from microgpt.cuda_backend import CudaBackend
from microgpt.kernels import layernorm, reductions
from microgpt.kernels.gemm import bf16 as g

N = 16384
ops = CudaBackend()
rng = np.random.default_rng(0)
args = sys.argv[1:]


def dev_bf16(*shape):
    return cuda.to_device(rng.standard_normal(shape, np.float32).astype(ml_dtypes.bfloat16)
                          .view(np.uint16))


def dev(*shape):
    return cuda.to_device(rng.standard_normal(shape, np.float32))


# (name, rows, columns, bf16, calls a step)
SUMS = [("dqkv bf16", N, 2304, True, 12), ("dfc bf16", N, 3072, True, 12),
        ("dresid f32", N, 768, False, 24)]
# not the step's (calls 0): dresid's bf16 copy, which the projections' dW read
EXTRA = [("dresid_mm bf16", N, 768, True, 0)]
sums = []
for name, n, m, low, calls in SUMS + EXTRA:
    x = dev_bf16(n, m) if low else dev(n, m)
    sums.append((name, x, cuda.to_device(np.zeros(m, np.float32)), n * m * (2 if low else 4), calls))

if "--ncu-sums" in args:
    for name, x, db, nbytes, calls in sums:
        reductions.bias_backward(db, x)
    cuda.synchronize()
    sys.exit()

# (name, M, N, K, out bf16, gelu); each plain and biased
GEMMS = [("qkv", N, 2304, 768, True, False), ("attn proj", N, 768, 768, False, False),
         ("fc gelu", N, 3072, 768, True, True), ("mlp proj", N, 768, 3072, False, False)]


def gemm_case(name, M, Nn, K, low, gelu):
    a, b = dev_bf16(M, K), dev_bf16(K, Nn)
    out = cuda.device_array((M, Nn), np.uint16 if low else np.float32)
    pre = cuda.device_array((M, Nn), np.uint16) if gelu else None
    return name, out, a, b, pre, dev(Nn), 2 * M * Nn * K


def gemm_fn(out, a, b, pre, bias):
    kw = dict(gelu="forward", pre=pre) if pre is not None else {}
    return lambda s: g.matmul_bf16(out, a, b, bias=bias, stream=s, **kw)


if "--ncu-gemm" in args:
    name, out, a, b, pre, bias, fl = gemm_case(*GEMMS[0])
    for bb in (None, bias):
        gemm_fn(out, a, b, pre, bb)(0)
    cuda.synchronize()
    sys.exit()

reps = 10
print("| column sums | ms | TB/s | torch sum(0) ms | TB/s | torch copy (read+write) TB/s |")
print("|---|---:|---:|---:|---:|---:|")
step_ms = 0.0
for name, x, db, nbytes, calls in sums:
    ms = captured_time(lambda s: reductions.bias_backward(db, x, stream=s), reps, ops)
    step_ms += calls * ms
    try:
        import torch
        t = torch.as_tensor(x, device="cuda")
        if x.dtype == np.uint16:
            t = t.view(torch.bfloat16)
        tms = torch_time(lambda: t.sum(0), reps)
        c = torch.empty_like(t)
        cms = torch_time(lambda: c.copy_(t), reps)
    except Exception as e:          # the reference only
        print("torch:", e)
        tms = cms = float("nan")
    print(f"| {name} {tuple(x.shape)} | {ms:.4f} | {nbytes / ms / 1e9:.2f} | {tms:.4f} | "
          f"{nbytes / tms / 1e9:.2f} | {2 * nbytes / cms / 1e9:.2f} |", flush=True)
total_bytes = sum(nb * calls for _, _, _, nb, calls in sums)
print(f"\nthe step's 48 column sums: {step_ms:.3f} ms, {total_bytes / step_ms / 1e9:.2f} TB/s\n")

C = 768
dinp, dout, inp = dev(N, C), dev(N, C), dev(N, C)
lw, dw, dbb = dev(C), dev(C), dev(C)
mean, rstd = dev(N), cuda.to_device(np.abs(rng.standard_normal(N, np.float32)) + 0.5)
ms = captured_time(lambda s: layernorm.layernorm_backward(dinp, dw, dbb, dout, inp, lw, mean, rstd,
                                                          stream=s), reps, ops)
print(f"layernorm_backward 16384x768 float32: {ms:.4f} ms (x25 a step: {25 * ms:.3f})\n", flush=True)

if "--gemm" in args:
    print("| GEMM | plain ms | biased ms | extra ms | x12 |")
    print("|---|---:|---:|---:|---:|")
    for case in GEMMS:
        name, out, a, b, pre, bias, fl = gemm_case(*case)
        plain = captured_time(gemm_fn(out, a, b, pre, None), reps, ops)
        biased = captured_time(gemm_fn(out, a, b, pre, bias), reps, ops)
        print(f"| {name} | {plain:.4f} | {biased:.4f} | {biased - plain:+.4f} | "
              f"{12 * (biased - plain):+.3f} |", flush=True)
        del out, a, b, pre, bias
    print(flush=True)

if "--sweep" in args and hasattr(reductions, "_column_sums"):
    print("| lane bytes, rows, unroll | max blocks | " + " | ".join(n for n, *_ in SUMS)
          + " | step ms | TB/s |")
    print("|---|---:|" + "---:|" * (len(SUMS) + 2))
    for config, blocks_list in [((16, 8, 8), (132, 264, 396)), ((16, 8, 4), (264, 396)),
                                ((32, 8, 4), (264,))]:
        for blocks in blocks_list:
            times, total = [], 0.0
            for name, x, db, nbytes, calls in sums[:len(SUMS)]:
                parts = reductions.column_sum_parts(x, blocks, *config)
                t = captured_time(lambda s: reductions._column_sums(
                    db, x, db, parts, s, *config), reps, ops)
                times.append(t)
                total += calls * t
            print(f"| {', '.join(map(str, config))} | {blocks} | "
                  + " | ".join(f"{t:.4f}" for t in times)
                  + f" | {total:.3f} | {total_bytes / total / 1e9:.2f} |", flush=True)
    print()
