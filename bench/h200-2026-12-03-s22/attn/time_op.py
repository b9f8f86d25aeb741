"""Session 22 (attn): the attention op as the step runs it (kernels.attention: the routed
forward and backward with their default tiles) at the issue's shapes, graph-replayed (20
launches a graph, the fastest of --reps replays): forward, backward, and both in one
graph, beside SDPA's cuDNN backend (forward, forward + backward) in the same process.
ms and TFLOP/s (causal: forward 2 B H T^2 D, backward 2.5 times that).

python3 time_op.py [--shapes 120m 4096 d128 12m] [--reps N] [--warm]"""
import argparse
import os
import sys

sys.path.insert(0, "tools")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ml_dtypes  # noqa: E402
import numpy as np  # noqa: E402
from numba import cuda  # noqa: E402

from benchmarks.attention import graph_time  # noqa: E402
from benchmarks.timing import torch_captured_time  # noqa: E402
from microgpt.kernels import attention, cache  # noqa: E402

SHAPES = {"120m": (16, 12, 1024, 64), "4096": (4, 12, 4096, 64), "d128": (8, 16, 2048, 128),
          "12m": (64, 12, 256, 32)}


def cudnn(host, reps):
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    q, k, v = (torch.from_numpy(x).cuda().bfloat16().requires_grad_() for x in host[:3])
    dout = torch.from_numpy(host[3]).cuda().bfloat16()
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        fwd = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True)  # noqa: E731
        return (torch_captured_time(fwd, reps),
                torch_captured_time(lambda: torch.autograd.grad(fwd(), (q, k, v), dout), reps))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--shapes", nargs="+", default=list(SHAPES))
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--warm", action="store_true")
    args = parser.parse_args()
    if os.environ.get("MICROGPT_TEST_KERNEL_CACHE"):
        cache.use(os.environ["MICROGPT_TEST_KERNEL_CACHE"])
    for name in args.shapes:
        shape = SHAPES[name]
        if args.warm:                  # the kernels at a small T of each route
            T = 4099 if shape[2] >= 4096 else 1027
            shape = (1, 2, T, shape[3])
        B, H, T, D = shape
        flops = 2 * B * H * T * T * D
        rng = np.random.default_rng(0)
        host = [rng.standard_normal(shape, np.float32) for _ in range(4)]
        q, k, v, dout = (cuda.to_device(x.astype(ml_dtypes.bfloat16).view(np.uint16))
                         for x in host)
        out, dq, dk, dv = (cuda.device_array(shape, np.uint16) for _ in range(4))
        lse, delta = (cuda.device_array(shape[:3], np.float32) for _ in range(2))

        def forward(s):
            attention.attention_forward(out, lse, q, k, v, stream=s)

        def backward(s):
            attention.attention_backward(dq, dk, dv, delta, dout, q, k, v, out, lse, stream=s)

        forward(0)
        backward(0)
        cuda.synchronize()
        if args.warm:
            print(f"warm {name} {shape}", flush=True)
            continue
        f, b = graph_time(forward, args.reps), graph_time(backward, args.reps)
        both = graph_time(lambda s: (forward(s), backward(s)), args.reps)
        cf, cboth = cudnn(host, args.reps)
        print(f"{name} {shape}: op forward {f:.4f} ms ({flops / f / 1e9:.0f} TFLOP/s), "
              f"backward {b:.4f} ({2.5 * flops / b / 1e9:.0f}), fwd+bwd {both:.4f} "
              f"({3.5 * flops / both / 1e9:.0f}); cuDNN {cf:.4f} ({flops / cf / 1e9:.0f}) / "
              f"{cboth:.4f} ({3.5 * flops / cboth / 1e9:.0f}); ratios forward "
              f"{f / cf:.3f}, fwd+bwd {both / cboth:.3f}", flush=True)


if __name__ == "__main__":
    main()
