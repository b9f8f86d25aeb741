"""Session 18's memory-bound kernels at andrea-120m shapes beside the device's copy: the
cross-entropy forward + backward staged and read twice (stage=False, the kernel before
this session), by block size; AdamW with its bf16 copy, and as the module given by
--adamw-main PATH (a copy of the kernels/adamw.py before it) has it; the step's other
memory-bound launches (the embedding, LayerNorm, GELU: "rest"); each timed as tools/bench.py times (CUDA events around
`reps` launches) and captured (tools/benchmarks/timing.captured_time: 20 launches in a
graph, the best of the replays). GB/s: the bytes the op must read and write once."""
import sys

import numpy as np
from numba import cuda

sys.path.insert(0, "tools")
from benchmarks.timing import captured_time, cuda_time  # noqa: E402

from microgpt.cuda_backend import CudaBackend  # noqa: E402
from microgpt.kernels import crossentropy  # noqa: E402

N, V = 16384, 50304
REPS = 10


def row(name, ms, nbytes):
    print(f"| {name} | {ms:.4f} | {nbytes / ms / 1e6:.0f} |", flush=True)


def load_module(path, name):
    """The kernels module at path, imported as microgpt.kernels.<name> (its relative
    imports resolved in the package)."""
    import importlib.util
    spec = importlib.util.spec_from_file_location(f"microgpt.kernels.{name}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module         # the kernel cache hashes its module's sources
    spec.loader.exec_module(module)
    return module


def bench_adamw(ops, adamw_main, n=124_392_960, n_decay=124_392_960 - 50 * 768):
    from microgpt.kernels import adamw
    rng = np.random.default_rng(1)

    def dev(scale):
        return cuda.to_device(np.resize(rng.standard_normal(1 << 20, dtype=np.float32) * scale, n))
    param, grad, m, v = dev(0.02), dev(0.02), dev(0.02), cuda.to_device(np.full(n, 1e-4, np.float32))
    norm_squared = cuda.to_device(np.ones(1, np.float32))
    hparams = cuda.to_device(np.array([1, 1e-4, 0.1, 0.05], np.float32))
    param16 = cuda.to_device(np.zeros(n_decay, np.uint16))
    modules = [("this tree", adamw)] + ([("before (main)", load_module(adamw_main, "adamw_main"))]
                                        if adamw_main else [])
    for label, module in modules:
        for copy in (True, False):
            def update(stream=0):
                module.adamw_update(param, grad, m, v, norm_squared, hparams, weight_decay=0.1,
                                    n_decay=n_decay, max_norm=1.0, beta1=0.9, beta2=0.95,
                                    eps=1e-8, param_bf16=param16 if copy else None,
                                    stream=stream)
            name = f"AdamW 124M{' + bf16 matrices' if copy else ''}, {label}"
            nbytes = n * 7 * 4 + (n_decay * 2 if copy else 0)
            row(name + " (events)", cuda_time(update, REPS), nbytes)
            row(name + " (captured)", captured_time(update, 5, ops), nbytes)


def bench_rest(ops, C=768):
    """The step's other memory-bound launches, with its dtypes: the embedding, the
    LayerNorm backward (float32 dout, the bf16 copy of dinp), the residual + LayerNorm
    forward (bf16 out), GELU forward bf16 -> bf16 and its backward in place on bf16."""
    from microgpt.kernels import elementwise, embedding, layernorm
    rng = np.random.default_rng(2)

    def dev(*shape, bf16=False):
        x = rng.standard_normal(shape, dtype=np.float32)
        if bf16:
            import ml_dtypes
            x = x.astype(ml_dtypes.bfloat16).view(np.uint16)
        return cuda.to_device(x)
    a, b, resid, dln, dresid = (dev(N, C) for _ in range(5))
    out16, dresid16, fc16, dfc16, gelu16 = (dev(N, C, bf16=True), dev(N, C, bf16=True),
                                            dev(N, 4 * C, bf16=True), dev(N, 4 * C, bf16=True),
                                            dev(N, 4 * C, bf16=True))
    w, bias, dw, db = dev(C), dev(C), dev(C), dev(C)
    mean, rstd = dev(N), cuda.to_device(np.abs(rng.standard_normal(N, dtype=np.float32)) + 1)
    nc, f32, bf16 = N * C, 4, 2
    T, V = 1024, 50304
    idx = cuda.to_device(rng.integers(0, V, (N // T, T)).astype(np.int32))
    wte, wpe = dev(V, C), dev(T, C)
    launches = [
        ("encoder forward (token + position embedding)",
         lambda stream=0: embedding.encoder_forward(a.reshape(N // T, T, C), idx, wte, wpe,
                                                    stream=stream),
         nc * 2 * f32 + T * C * f32),
        ("layernorm backward, float32 dout, bf16 copy of dinp",
         lambda stream=0: layernorm.layernorm_backward(dresid, dw, db, dln, resid, w, mean, rstd,
                                                       dinp_copy=dresid16, stream=stream),
         nc * (4 * f32 + bf16)),
        ("residual + layernorm forward, bf16 out",
         lambda stream=0: layernorm.residual_layernorm_forward(resid, out16, mean, rstd, a, b, w,
                                                               bias, stream=stream),
         nc * (3 * f32 + bf16)),
        ("gelu forward, bf16 -> bf16",
         lambda stream=0: elementwise.gelu_forward(gelu16, fc16, stream=stream), 4 * nc * 2 * bf16),
        ("gelu backward in place, bf16",
         lambda stream=0: elementwise.gelu_backward(dfc16, dfc16, fc16, stream=stream),
         4 * nc * 3 * bf16),
    ]
    for name, launch, nbytes in launches:
        row(name + " (captured)", captured_time(launch, 5, ops), nbytes)


def main(which, adamw_main=None):
    ops = CudaBackend()
    rng = np.random.default_rng(0)
    print("| op | ms | GB/s |\n|---|---:|---:|")
    if "copy" in which:
        src = cuda.to_device(np.resize(rng.standard_normal(1 << 20, dtype=np.float32),
                                       N * V // 2))          # 1.65 GB, a bf16 logits' size
        dst = cuda.device_array_like(src)
        row("device-to-device copy, 1.65 GB", cuda_time(lambda: dst.copy_to_device(src), REPS),
            2 * src.nbytes)
        del src, dst
    targets = cuda.to_device(rng.integers(0, V, N).astype(np.int32))
    losses = cuda.device_array(N, np.float32)
    for dtype, label in ((np.uint16, "bf16"), (np.float32, "float32")):
        if label not in which:
            continue
        block = rng.standard_normal((256, V), dtype=np.float32) * 2
        if dtype == np.uint16:
            import ml_dtypes
            block = block.astype(ml_dtypes.bfloat16).view(np.uint16)
        logits = cuda.to_device(np.resize(block, (N, V)))
        nbytes = 2 * logits.nbytes
        for staged, blocks in ((False, (512,)), (True, (256, 512, 1024))):
            for b in blocks:
                def fb(stream=0):
                    crossentropy.crossentropy_forward_backward(losses, logits, targets, 1.0 / N,
                                                               stream=stream, block=b,
                                                               stage=staged)
                name = f"crossentropy fwd+bwd {label}, staged {staged}, block {b}"
                row(name + " (events)", cuda_time(fb, REPS), nbytes)
                row(name + " (captured)", captured_time(fb, 5, ops), nbytes)
        del logits
    if "adamw" in which:
        bench_adamw(ops, adamw_main)
    if "rest" in which:
        bench_rest(ops)


if __name__ == "__main__":
    import argparse
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("which", nargs="*", default=["copy", "bf16", "float32", "adamw", "rest"])
    parser.add_argument("--adamw-main", help="a copy of the AdamW module to time beside")
    args = parser.parse_args()
    main(args.which, args.adamw_main)
