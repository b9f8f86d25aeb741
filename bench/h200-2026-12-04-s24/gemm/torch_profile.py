"""Where torch.compile's training step spends its GPU time: the same step as the bench's
steps section (tools/benchmarks/steps.py: tools/torch_gpt.py under torch.compile, bf16
autocast, fused AdamW, clipping), its CUDA kernels over --steps steps from torch.profiler,
grouped into the kinds of microgpt's ops (tools/profile_step.py) so that the two tables
meet row by row. One markdown table a geometry; the wall time of a step beside the sum of
its kernels (the gap: the device idle, waiting on the host).

    python torch_profile.py --geometries andrea-12m andrea-120m --out torch_profile.md

Run once beside other work first (it compiles: inductor's cache under /tmp keeps it for
the quiet run).
"""
import argparse
import collections
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[3]
sys.path[:0] = [str(ROOT / "tools"), str(ROOT)]
from benchmarks.steps import GEOMETRIES     # noqa: E402
from torch_gpt import torch_gpt, training_step   # noqa: E402
from microgpt import get_config             # noqa: E402

# (kind, substrings of the kernel's name), first match wins: inductor names its fused
# kernels after the aten ops they hold (triton_red_fused_native_layer_norm_...)
KINDS = [
    ("attention", ("flash", "fmha", "attention", "cudnn", "sdpa")),
    ("gemm", ("gemm", "nvjet", "xmma", "cutlass", "cublas", "_mma_", "splitk", "sm90_")),
    ("adamw + clip", ("adam", "multi_tensor", "foreach", "norm_kernel", "l2norm")),
    ("cross-entropy", ("nll_loss", "log_softmax", "_softmax", "logsumexp", "cross_entropy")),
    ("layernorm", ("layer_norm", "native_layer_norm", "layernorm")),
    ("gelu", ("gelu", "tanh")),
    ("embedding", ("embedding", "index_put", "scatter", "indexing_backward")),
    ("memset / copy", ("memset", "memcpy", "fill", "copy")),
]


def kind(name):
    low = name.lower()
    for k, words in KINDS:
        if any(w in low for w in words):
            return k
    return "other"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--geometries", nargs="+", default=["andrea-12m"])
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--out")
    args = parser.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    lines = [f"Command: `python {' '.join(sys.argv)}`", ""]
    for label, name, overrides, B, T in GEOMETRIES:
        if label not in args.geometries:
            continue
        cfg = get_config(name, **overrides)
        rng = np.random.default_rng(0)
        idx = torch.from_numpy(rng.integers(0, cfg.vocab_size, (B, T))).long().cuda()
        targets = torch.from_numpy(rng.integers(0, cfg.vocab_size, (B, T))).long().cuda()
        step = training_step(torch_gpt(cfg), idx, targets, compiled=True)

        t0 = time.perf_counter()
        for _ in range(3):
            step()
        torch.cuda.synchronize()
        print(f"{label}: compiled and warmed in {time.perf_counter() - t0:.1f} s", flush=True)
        t0 = time.perf_counter()
        for _ in range(args.steps):
            step()
        torch.cuda.synchronize()
        wall_ms = 1e3 * (time.perf_counter() - t0) / args.steps
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            for _ in range(args.steps):
                step()
            torch.cuda.synchronize()
        per_kernel, calls = collections.defaultdict(float), collections.Counter()
        for e in prof.events():
            if e.device_type != torch.autograd.DeviceType.CUDA:
                continue
            per_kernel[e.name] += e.time_range.elapsed_us() / 1e3 / args.steps
            calls[e.name] += 1
        total = sum(per_kernel.values())
        by_kind = collections.defaultdict(float)
        kind_calls = collections.Counter()
        for k, ms in per_kernel.items():
            by_kind[kind(k)] += ms
            kind_calls[kind(k)] += calls[k] / args.steps
        first = len(lines)
        lines += [f"## torch.compile, {label}, B {B}, T {T}, bf16 autocast", "",
                  f"A step (mean of {args.steps}, unprofiled): {wall_ms:.3f} ms, "
                  f"{B * T / wall_ms * 1e3:,.0f} tokens/s; its kernels (profiled): "
                  f"{total:.3f} ms in {sum(calls.values()) / args.steps:.0f} launches.", "",
                  "| kind | launches | ms | share |", "|---|--:|--:|--:|"]
        for k, ms in sorted(by_kind.items(), key=lambda kv: -kv[1]):
            lines.append(f"| {k} | {kind_calls[k]:.0f} | {ms:.3f} | {ms / total:.1%} |")
        lines += ["", "| kernel | kind | launches | ms | share |", "|---|---|--:|--:|--:|"]
        for k, ms in sorted(per_kernel.items(), key=lambda kv: -kv[1])[:args.top]:
            lines.append(f"| `{k[:110]}` | {kind(k)} | {calls[k] / args.steps:.0f} | "
                         f"{ms:.3f} | {ms / total:.1%} |")
        lines.append("")
        print("\n".join(lines[first:]), flush=True)
        step = prof = None
        torch.cuda.empty_cache()
    if args.out:
        Path(args.out).write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
