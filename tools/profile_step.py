#!/usr/bin/env python3
"""Where a training step's GPU time goes: every op of one step, timed on the device.

    python tools/profile_step.py --config andrea-120m --batch-size 16 --seq-len 1024 \\
        --precision bf16 --out docs/profile-120m-bf16.md

One eager step compiles the kernels; then a spin kernel holds the stream while the host
enqueues a second eager step with a CUDA event between every two ops, so the device runs
the ops back to back (as a captured graph would) and each gap between two events is that
op's time on the device alone, not the host's launch cost. If the spin ends before the
host has queued the last op, the step is timed again behind a spin twice as long. The ops
are grouped by name and operand shapes; the report lists them by total time, beside the
captured step's time
per step for scale. tools/profile_decode.py times a decoding step the same way.

With --torch-compile, the bench's PyTorch GPT of the same geometry under torch.compile
(tools/torch_gpt.py, as tools/bench.py's steps section times it) is profiled in the same
process (torch.profiler, its CUDA kernels over a few steps), and both steps are set side
by side by kind of work (GEMMs, attention, LayerNorm, ...): where microgpt's step loses.
"""
import argparse
import collections
import contextlib
import sys
import time

import numpy as np


def sleep_kernel():
    """A kernel that keeps the device busy for about n microseconds: sleep[1, 1, s](n)."""
    from numba import cuda

    @cuda.jit
    def sleep(n):
        for _ in range(n):
            cuda.nanosleep(1000)
    return sleep


def describe(name, args, kwargs):
    """An op's label: its name, the shapes and dtypes of its array operands, its flags."""
    parts = []
    for a in args:
        if hasattr(a, "shape") and hasattr(a, "dtype"):
            kind = "bf16" if a.dtype == np.uint16 else str(a.dtype)
            parts.append("x".join(map(str, a.shape)) + ":" + kind)
    flags = [k for k, v in kwargs.items() if v is True]
    return f"{name}({', '.join(parts)}{'; ' + ', '.join(flags) if flags else ''})"


@contextlib.contextmanager
def instrumented(backend, names=None):
    """While it lasts, backend's ops (every op of OPS, fill_zero and copy) each record a
    timing event before they run -> the list they append to: (label, name, args, event)."""
    from numba import cuda

    from microgpt.ops import OPS

    marks, names = [], names or list(OPS) + ["fill_zero", "copy"]

    def timed(name, method):
        def op(*a, **k):
            event = cuda.event(timing=True)
            event.record(stream=backend.stream)
            marks.append((describe(name, a, k), name, a, event))
            return method(*a, **k)
        return op
    for name in names:
        setattr(backend, name, timed(name, getattr(backend, name)))
    try:
        yield marks
    finally:
        for name in names:
            delattr(backend, name)      # the class's own method again


def behind_spin(backend, marks, run, drain=lambda: None):
    """run() enqueued behind a spin kernel, so that its ops run back to back on the device
    -> the event recorded after its last op (marks, from instrumented, hold the others).
    drain() then reads back what run() left (a step's metrics). The spin doubles until
    it outlasts the host's enqueueing."""
    from numba import cuda

    sleep = sleep_kernel()
    sleep[1, 1, backend.stream](1)
    backend.synchronize()
    spin_us = 300_000
    while True:
        marks.clear()
        sleep[1, 1, backend.stream](spin_us)    # the host enqueues the step meanwhile
        slept = cuda.event()
        slept.record(stream=backend.stream)
        run()
        caught_up = slept.query()       # the spin ended before the last op was queued
        end = cuda.event(timing=True)
        end.record(stream=backend.stream)
        end.synchronize()
        drain()
        if not caught_up:
            return end
        spin_us *= 2                    # the device waited on the host somewhere: again
        print(f"the host queued slower than the spin; again with {spin_us / 1e6:.1f} s",
              file=sys.stderr)


def op_times(marks, end):
    """Each mark's op and its time on the device -> [(mark, ms)]."""
    from numba import cuda

    stops = [m[-1] for m in marks[1:]] + [end]
    return [(m, cuda.event_elapsed_time(m[-1], stop)) for m, stop in zip(marks, stops)]


def group(times):
    """op_times' list -> ms per label, calls per label, ms per op name."""
    totals, counts = collections.defaultdict(float), collections.Counter()
    by_op = collections.defaultdict(float)
    for (label, name, *_), ms in times:
        totals[label] += ms
        counts[label] += 1
        by_op[name] += ms
    return totals, counts, by_op


# The kinds of work both steps are compared by: microgpt's ops, and torch.compile's kernels
# by the words in their names (first match wins; inductor names a fused kernel after the
# aten ops it holds, triton_per_fused_add_native_layer_norm_..., and a GELU of tanh's
# form decomposes into tanh and products). GELU goes with the GEMMs: microgpt's runs in
# or beside the MLP's products (matmul_gelu_forward, matmul_gelu_backward).
OP_KINDS = {"matmul": "GEMM (+ GELU)", "matmul_gelu_forward": "GEMM (+ GELU)",
            "matmul_gelu_backward": "GEMM (+ GELU)", "attention_forward": "attention",
            "attention_backward": "attention", "layernorm_forward": "LayerNorm (+ residual)",
            "residual_layernorm_forward": "LayerNorm (+ residual)",
            "layernorm_backward": "LayerNorm (+ residual)",
            "crossentropy_forward_backward": "cross-entropy", "adamw_update": "AdamW + clip",
            "global_norm_squared": "AdamW + clip", "adamw_schedule": "AdamW + clip",
            "encoder_forward": "embedding", "encoder_backward": "embedding",
            "fill_zero": "memset / copy", "copy": "memset / copy"}
KERNEL_KINDS = [
    ("attention", ("flash", "fmha", "attention", "sdpa")),
    ("GEMM (+ GELU)", ("gemm", "nvjet", "xmma", "cutlass", "cublas", "splitk", "gelu",
                       "tanh")),
    ("AdamW + clip", ("adam", "multi_tensor", "foreach")),
    ("cross-entropy", ("nll_loss", "log_softmax", "logsumexp", "cross_entropy")),
    ("LayerNorm (+ residual)", ("layer_norm", "layernorm")),
    ("embedding", ("embedding", "index_put", "scatter", "indexing_backward")),
    ("memset / copy", ("memset", "memcpy", "fill", "copy")),
]


def kernel_kind(name):
    low = name.lower()
    return next((kind for kind, words in KERNEL_KINDS if any(w in low for w in words)),
                "other")


# the aten ops whose kernels are the GEMMs (inductor calls cuBLAS through them)
TORCH_GEMMS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::matmul")


def torch_compile_kernels(cfg, idx, targets, steps=5):
    """torch.compile's training step of cfg on these tokens -> (ms of a step by the wall
    clock, unprofiled; {kernel name: (ms a step, launches a step)} from torch.profiler;
    {(aten op, its operands' shapes): (ms a step, calls a step)} of the GEMMs)."""
    import torch
    from torch_gpt import torch_gpt, training_step

    torch.backends.cuda.matmul.allow_tf32 = False
    t_idx, t_targets = (torch.from_numpy(a).long().cuda() for a in (idx, targets))
    step = training_step(torch_gpt(cfg), t_idx, t_targets, compiled=True)
    for _ in range(3):                  # compiles (its warm-up recompiles once)
        step()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    torch.cuda.synchronize()
    wall_ms = 1e3 * (time.perf_counter() - t0) / steps
    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=activities, record_shapes=True) as prof:
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
    return (wall_ms, *kernel_times(prof.events(), torch.autograd.DeviceType.CUDA, steps))


def kernel_times(events, cuda, steps):
    """torch.profiler's events over `steps` steps -> ({kernel name: (ms a step, launches a
    step)}, {(aten op, its operands' shapes): (ms a step, calls a step)} of the GEMMs).
    The device's timeline also holds user annotations, ranges over many kernels (inductor's
    "## Call CompiledFxGraph ... ##", "Optimizer.step#AdamW.step"): they are not kernels
    (counted as kernels, session 27's profile gave torch.compile's andrea-120m step 66 ms
    of kernels in a 33 ms step)."""
    kernels = collections.defaultdict(lambda: [0.0, 0])
    gemms = collections.defaultdict(lambda: [0.0, 0])
    for e in events:
        if e.device_type == cuda:
            if not e.is_user_annotation:
                kernels[e.name][0] += e.time_range.elapsed_us() / 1e3 / steps
                kernels[e.name][1] += 1 / steps
        elif e.name in TORCH_GEMMS and getattr(e, "kernels", None):
            key = (e.name, " x ".join(str(tuple(shape)) for shape in e.input_shapes if shape))
            gemms[key][0] += sum(k.duration for k in e.kernels) / 1e3 / steps
            gemms[key][1] += 1 / steps
    return ({name: tuple(v) for name, v in kernels.items()},
            {key: tuple(v) for key, v in gemms.items()})


def comparison_lines(by_op, calls, graph_ms, torch_wall_ms, kernels, gemms, top=20):
    """The two steps by kind of work, torch.compile's largest kernels and its GEMMs by
    operand shapes -> lines."""
    ours, ours_calls = collections.defaultdict(float), collections.Counter()
    for name, ms in by_op.items():
        ours[OP_KINDS.get(name, "other")] += ms
        ours_calls[OP_KINDS.get(name, "other")] += calls[name]
    theirs, their_calls = collections.defaultdict(float), collections.defaultdict(float)
    for name, (ms, n) in kernels.items():
        theirs[kernel_kind(name)] += ms
        their_calls[kernel_kind(name)] += n
    lines = ["", "## Beside torch.compile", "",
             f"torch.compile's step (tools/torch_gpt.py, bf16 autocast, fused AdamW): "
             f"{torch_wall_ms:.2f} ms by the wall clock, its kernels {sum(theirs.values()):.2f} "
             f"ms in {sum(their_calls.values()):.0f} launches (torch.profiler); microgpt's "
             f"captured step {graph_ms:.2f} ms, its ops {sum(ours.values()):.2f} ms in "
             f"{sum(ours_calls.values())} ops (an op may launch several kernels).", "",
             "| kind | microgpt ops | microgpt ms | torch.compile kernels | torch.compile ms "
             "| microgpt - torch.compile ms |", "|---|--:|--:|--:|--:|--:|"]
    for kind in sorted(set(ours) | set(theirs), key=lambda k: -max(ours[k], theirs[k])):
        lines.append(f"| {kind} | {ours_calls[kind]} | {ours[kind]:.3f} | "
                     f"{their_calls[kind]:.0f} | {theirs[kind]:.3f} | "
                     f"{ours[kind] - theirs[kind]:+.3f} |")
    lines += ["", "| torch.compile kernel | kind | launches | ms |", "|---|---|--:|--:|"]
    for name, (ms, n) in sorted(kernels.items(), key=lambda kv: -kv[1][0])[:top]:
        lines.append(f"| `{name[:100]}` | {kernel_kind(name)} | {n:.0f} | {ms:.3f} |")
    lines += ["", "torch.compile's GEMMs by the shapes of their operands (their kernels' time):",
              "", "| aten op | operands | calls | ms |", "|---|---|--:|--:|"]
    for (name, shapes), (ms, n) in sorted(gemms.items(), key=lambda kv: -kv[1][0]):
        lines.append(f"| {name} | {shapes} | {n:.0f} | {ms:.3f} |")
    return lines


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="andrea-120m")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--seq-len", type=int, default=1024)
    parser.add_argument("--precision", choices=("fp32", "bf16"), default="bf16")
    parser.add_argument("--bias", action="store_true",
                        help="GPT-2's biases in every linear layer (the config's bias=True)")
    parser.add_argument("--deterministic", action="store_true",
                        help="the backend that gives the same bits every run (the "
                        "trainer's --deterministic)")
    parser.add_argument("--torch-compile", action="store_true",
                        help="profile torch.compile's step of the same geometry too, and "
                        "set the two side by side by kind of work")
    parser.add_argument("--out", help="markdown file to write (default: print only)")
    args = parser.parse_args(argv)

    from microgpt import GPT, get_config
    from microgpt.backend import cuda_available, get_backend
    from microgpt.data import default_cache_dir
    from microgpt.kernels import cache as kernel_cache
    from microgpt.optim import AdamW, AdamWConfig
    from microgpt.step import Step

    if not cuda_available():
        print("profile_step.py: no CUDA GPU found; it times kernels on one", file=sys.stderr)
        return 2
    kernel_cache.use(default_cache_dir() / "kernels")      # the trainer's compiled kernels
    cfg = get_config(args.config, **(dict(bias=True) if args.bias else {}))
    B, T = args.batch_size, args.seq_len
    rng = np.random.default_rng(0)
    idx = rng.integers(0, cfg.vocab_size, (B, T)).astype(np.int32)
    targets = rng.integers(0, cfg.vocab_size, (B, T)).astype(np.int32)
    model = GPT(cfg, backend=get_backend("cuda", deterministic=args.deterministic),
                precision=args.precision)
    backend = model.backend
    step = Step(model, AdamW(model, AdamWConfig(total_steps=10**6)), B, T)

    step.run(idx, targets)          # eager: compiles every kernel
    step.run(idx, targets)          # captures the graph
    backend.synchronize()
    t0 = time.perf_counter()
    reps = 10
    for _ in range(reps):
        step.run(idx, targets)
    step.metrics()
    graph_ms = 1e3 * (time.perf_counter() - t0) / reps

    step.graph = False
    with instrumented(backend) as marks:
        end = behind_spin(backend, marks, lambda: step.run(idx, targets), step.metrics)
    totals, counts, by_op = group(op_times(marks, end))
    step_ms = sum(totals.values())
    calls = collections.Counter(name for _, name, *_ in marks)

    lines = [f"# Step profile: {args.config}{' with biases' if args.bias else ''}, B {B}, T {T}, "
             f"{args.precision}", "",
             f"Command: `python tools/profile_step.py {' '.join(argv or sys.argv[1:])}`", "",
             f"Sum of the ops ({len(marks)} calls): {step_ms:.2f} ms; the captured step: "
             f"{graph_ms:.2f} ms ({B * T / graph_ms * 1e3:,.0f} tokens/s).", "",
             "| op | calls | ms | share |", "|---|---:|---:|---:|"]
    for name, ms in sorted(by_op.items(), key=lambda kv: -kv[1]):
        lines.append(f"| {name} | {calls[name]} | {ms:.3f} | {ms / step_ms:.1%} |")
    lines += ["", "| op and operands | calls | ms | share |", "|---|---:|---:|---:|"]
    for label, ms in sorted(totals.items(), key=lambda kv: -kv[1]):
        lines.append(f"| `{label}` | {counts[label]} | {ms:.3f} | {ms / step_ms:.1%} |")
    if args.torch_compile:
        lines += comparison_lines(by_op, calls, graph_ms,
                                  *torch_compile_kernels(cfg, idx, targets))
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
