#!/usr/bin/env python3
"""Speed and memory of microgpt's CUDA backend, against PyTorch measured in the same run.

    python tools/bench.py --out bench/RESULTS.md            # everything (needs a GPU + torch)
    python tools/bench.py --only kernels --out /tmp/k.md

Seven sections:
  gemm     every GEMM of an andrea-120m and an andrea-12m training step on the bf16 tensor
           cores (kernels/gemm/), in TFLOP/s beside torch.mm in bf16 (cuBLAS);
           --gemm-sweep also times every tile and split-K candidate and reports the best;
           --gemm-captured times microgpt's launches in a CUDA graph, as the step runs;
  attention  flash attention on the tensor cores (kernels/attention/flash.py, and the wgmma
           forward of hopper.py on sm_90), forward and forward + backward, beside SDPA's
           flash and cuDNN backends in bf16 (causal) at andrea-120m, T 4096, D 128,
           andrea-12m and head_dim 72 shapes; --attention-sweep also times the tile
           candidates;
  kernels  every backend op at andrea-120m shapes (B 16, T 1024, C 768, 12 heads of 64,
           V 50304), timed with CUDA events, beside the PyTorch op that does the same work
           in float32 (TF32 off);
  steps    tokens/s and peak device memory of a whole training step (forward, backward,
           AdamW) for andrea-12m (B 64, T 256), andrea-120m (B 16, T 1024; and B 4, T 4096)
           and the GPT-2 medium and XL geometries (B 16 and 8, T 1024) in bf16 (fp32 too at
           the andrea sizes), beside a PyTorch model of the same architecture in float32 (TF32 off), bf16
           autocast, and bf16 autocast under torch.compile; --steps-recompute gelu all
           also times microgpt's step with GELU's output (all: the LayerNorms' too)
           recomputed in the backward, as the trainer's --recompute;
  fused    the fused kernels of mixed precision (residual + LayerNorm, cross-entropy
           forward + backward, bf16 outputs) at andrea-120m shapes, beside the unfused
           launches they replace;
  generate tokens/s of python -m microgpt.sample's generation (microgpt/generate.py: a
           captured decoding step, sampling on the device) for andrea-120m at batch 1 and
           16 and andrea-12m at batch 1, and the time to the first token of a 512-token
           prompt, beside transformers' generate when it is importable; --device cpu
           measures it on the NumPy backend, without a GPU or torch.
The file written holds the machine, the versions and the command. Ratios are what count:
absolute figures move 10-30% between runs.

Each section is a module of tools/benchmarks/ (its bench_<section> and <section>_report);
this file holds the arguments, the dispatch and the report's header. The PyTorch GPT the
steps section times is tools/torch_gpt.py.
"""

import argparse
import datetime
import importlib.metadata
import os
import platform
import sys

import numpy as np
from benchmarks.attention import attention_report, bench_flash_attention
from benchmarks.fused import bench_fused, fused_report
from benchmarks.gemm import bench_gemm, gemm_report
from benchmarks.generate import bench_generate, generate_report
from benchmarks.kernels import bench_kernels, kernels_report
from benchmarks.steps import GEOMETRIES, bench_steps, steps_report
from benchmarks.timing import CAPTURED_LAUNCHES


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
        lines += kernels_report(kernels)
    if steps:
        lines += steps_report(steps)
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
                        help="generate: new tokens per sequence (default: 200)")
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
    parser.add_argument("--steps-geometries", nargs="+", metavar="LABEL",
                        choices=[g[0] for g in GEOMETRIES],
                        help="steps: only these rows (default: all of them)")
    parser.add_argument("--steps-runs", nargs="+", metavar="NAME",
                        help="steps: only these runs, by the names of their figures "
                        "(ours_bf16_graph, ours_bf16_graph_recomputed_gelu, "
                        "ours_bf16_graph_recomputed, ours_bf16_eager, torch_bf16, "
                        "torch_compile, ...; default: all that apply but the recomputed "
                        "ones, timed only when named here or by --steps-recompute)")
    parser.add_argument("--steps-recompute", nargs="+", metavar="MODE",
                        choices=["off", "gelu", "all", "on"], default=["off"],
                        help="steps: also time microgpt's bf16 graph with these recompute "
                        "modes (the trainer's --recompute: gelu, GELU's output written again "
                        "in the backward; all or on, the LayerNorms' too), whatever "
                        "--steps-runs names, beside the kept step (off; default: off alone)")
    parser.add_argument("--reps", type=int, default=10, help="timed repetitions per measurement")
    parser.add_argument("--out", default="bench/RESULTS.md", help="markdown file to write")
    args = parser.parse_args(argv)
    from microgpt.backend import cuda_available

    command = "python tools/bench.py " + " ".join(argv or sys.argv[1:])
    if args.device == "cpu":
        if args.only != "generate":
            parser.error("--device cpu runs the generate section only: pass --only generate")
        write_report(args.out, [], [], [], command, device="cpu",
                     generation=bench_generate("cpu", args.gen_tokens))
        return 0
    if not cuda_available():
        print("bench.py: no CUDA GPU found; the benchmarks need one (and PyTorch)", file=sys.stderr)
        return 2
    from microgpt.data import default_cache_dir
    from microgpt.kernels import cache as kernel_cache

    # the trainer's compiled kernels: a run after one of the same shapes loads them rather
    # than compiling (a minute and more for a GPT-2 geometry's step); every section times
    # only after its first launches, so the figures are the same either way
    kernel_cache.use(default_cache_dir() / "kernels")
    gemm = (bench_gemm(args.reps, args.gemm_sweep, args.gemm_captured)
            if args.only in (None, "gemm") else [])
    attention = (bench_flash_attention(args.reps, args.attention_sweep)
                 if args.only in (None, "attention") else [])
    kernels = bench_kernels(args.reps) if args.only in (None, "kernels") else []
    recompute = tuple({"on": "all"}.get(m, m) for m in args.steps_recompute if m != "off")
    steps = (bench_steps(max(2, args.reps // 2), not args.no_torch_compile, not args.bf16_only,
                         args.steps_geometries, args.steps_runs, recompute)
             if args.only in (None, "steps") else [])
    fused = bench_fused(args.reps) if args.only in (None, "fused") else []
    generation = (bench_generate("cuda", args.gen_tokens)
                  if args.only in (None, "generate") else [])
    write_report(args.out, gemm, kernels, steps, command, args.gemm_sweep, attention,
                 args.attention_sweep, fused, generation, gemm_captured=args.gemm_captured)
    return 0


if __name__ == "__main__":
    sys.exit(main())
