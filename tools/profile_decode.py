#!/usr/bin/env python3
"""Where a decoding step's GPU time goes: every op of one step of microgpt.generate, timed
on the device, with the bytes it must move and the bandwidth that makes.

    python tools/profile_decode.py --cases andrea-120m:1 andrea-120m:16 andrea-12m:1 \\
        --out /tmp/decode.md

Per case (config:batch), in bf16: B random prompts of --position tokens are prefilled,
then one eager step runs behind a spin kernel with an event between every two ops
(tools/profile_step.py's method: the device runs them back to back, as the graph does).
Each op's bytes are those it cannot avoid: its operands once (a GEMM's weights, its rows
in and out), the KV cache up to each sequence's position, the embedding rows of the
tokens. Beside the sum of the ops: the captured step replayed back to back, and
generate()'s wall time per token (200 tokens, the bench's call), which adds the host's
loop; and sample_tokens at the sampled setting (temperature 0.8, top-k 40).
"""
import argparse
import collections
import sys
import time

import numpy as np
from profile_step import behind_spin, group, instrumented, op_times

GREEDY = dict(temperature=0.0, top_k=0)
SAMPLED = dict(temperature=0.8, top_k=40)
PEAK_GBS = 4800         # the H200's HBM3e, GB/s
REPLAYS = 50            # of the captured step, timed back to back


def nbytes(x):
    return x.nbytes if hasattr(x, "nbytes") and hasattr(x, "shape") else 0


def bytes_moved(name, args, positions):
    """The bytes an op must read and write at least (see the module's docstring)."""
    if name == "attention_decode":                  # out, kv, qkv, seq, n_head
        out, kv, qkv, seq = args[:4]
        B, S, width = kv.shape
        read = sum(int(p) + 1 for p in positions) * width * kv.dtype.itemsize
        return read + nbytes(out) + nbytes(qkv) + nbytes(seq)
    if name == "decode_embedding":                  # out, seq, wte, wpe: a row of each
        out, seq, wte, wpe = args[:4]
        B = out.shape[0]
        C = out.size // B
        return nbytes(out) + nbytes(seq) + B * C * (wte.dtype.itemsize + wpe.dtype.itemsize)
    return sum(nbytes(a) for a in args)


def profile_case(model, batch, position, steps):
    """One case's figures -> dict: ops (label, calls, µs, bytes), graph µs, generate µs,
    sampled_us (sample_tokens at SAMPLED)."""
    from microgpt.generate import Decoder, Sampling, generate

    cfg, ops = model.config, model.backend
    rng = np.random.default_rng(0)
    prompts = [list(rng.integers(0, cfg.vocab_size, position)) for _ in range(batch)]
    short = [p[:16] for p in prompts]           # the bench's prompts
    greedy, sampled = Sampling(**GREEDY), Sampling(**SAMPLED)
    decoder = Decoder(model, batch)

    def restart():
        decoder.start_many(list(range(batch)), prompts, [10**6] * batch, [0] * batch)
    generate(model, short, steps, greedy, decoder=decoder)              # compiles, captures
    ops.synchronize()
    t0 = time.perf_counter()
    generate(model, short, steps, greedy, decoder=decoder)
    generate_us = 1e6 * (time.perf_counter() - t0) / steps
    restart()
    decoder.step(greedy)
    ops.synchronize()
    t0 = time.perf_counter()
    for _ in range(REPLAYS):
        decoder.step(greedy)
    ops.synchronize()
    graph_us = 1e6 * (time.perf_counter() - t0) / REPLAYS

    decoder.graph = False
    result = dict(generate_us=generate_us, graph_us=graph_us)
    for label, sampling in (("greedy", greedy), ("sampled", sampled)):
        restart()
        decoder.step(sampling)          # compiles this setting's kernel
        restart()
        with instrumented(ops) as marks:
            end = behind_spin(ops, marks, lambda: decoder.step(sampling), ops.synchronize)
            times = op_times(marks, end)
        if label == "sampled":
            result["sampled_us"] = 1e3 * sum(ms for m, ms in times if m[1] == "sample_tokens")
            continue
        totals, counts, _ = group(times)
        moved = collections.defaultdict(int)
        for (lab, name, args, _), _ms in times:
            moved[lab] += bytes_moved(name, args, [position - 1] * batch)
        result["ops"] = [(lab, counts[lab], 1e3 * ms, moved[lab])
                         for lab, ms in sorted(totals.items(), key=lambda kv: -kv[1])]
    return result


def report(name, batch, position, r):
    ops = r["ops"]
    total_us = sum(us for _, _, us, _ in ops)
    total_bytes = sum(b for *_, b in ops)
    launches = sum(c for _, c, _, _ in ops)
    lines = [f"## {name}, batch {batch}, bf16, at position {position}", "",
             f"Sum of the ops: {total_us:.1f} µs for {launches} launches, "
             f"{total_bytes / 1e6:.1f} MB ({total_bytes / total_us / 1e3:,.0f} GB/s; the "
             f"memory bound {total_bytes / PEAK_GBS / 1e3:.1f} µs at {PEAK_GBS} GB/s). "
             f"The captured step replayed: {r['graph_us']:.1f} µs; generate() per token "
             f"(200 tokens, host loop and prefill included): {r['generate_us']:.1f} µs "
             f"({batch * 1e6 / r['generate_us']:,.0f} tok/s). sample_tokens sampled "
             f"(T 0.8, top-k 40): {r['sampled_us']:.1f} µs.", "",
             "| op and operands | calls | µs | µs/call | MB | GB/s | share |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for label, calls, us, moved in ops:
        lines.append(f"| `{label}` | {calls} | {us:.1f} | {us / calls:.2f} | "
                     f"{moved / 1e6:.2f} | {moved / us / 1e3:,.0f} | {us / total_us:.1%} |")
    return lines + [""]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", nargs="+",
                        default=["andrea-120m:1", "andrea-120m:16", "andrea-12m:1"],
                        help="config:batch ...")
    parser.add_argument("--position", type=int, default=116,
                        help="prompt tokens, so the profiled step runs at this position - 1 "
                        "(default 116: the bench's mean, 16 + 200 / 2)")
    parser.add_argument("--cuda-cores", action="store_true",
                        help="the skinny products in bf16 on the CUDA cores' kernels, not "
                        "the tensor cores' (kernels/gemm/skinny.py's TENSOR_CORES), to compare")
    parser.add_argument("--out", help="markdown file to write (default: print only)")
    args = parser.parse_args(argv)

    from microgpt import GPT, get_config
    from microgpt.backend import cuda_available
    from microgpt.data import default_cache_dir
    from microgpt.kernels import cache as kernel_cache
    from microgpt.kernels.gemm import skinny

    if not cuda_available():
        print("profile_decode.py: no CUDA GPU found; it times kernels on one", file=sys.stderr)
        return 2
    kernel_cache.use(default_cache_dir() / "kernels")      # the trainer's compiled kernels
    skinny.TENSOR_CORES = not args.cuda_cores
    where = " (the skinny products on the CUDA cores)" if args.cuda_cores else ""
    lines = [f"# Decoding step profile{where}", "",
             f"Command: `python tools/profile_decode.py {' '.join(argv or sys.argv[1:])}`", ""]
    models = {}
    for case in args.cases:
        name, batch = case.split(":")
        if name not in models:
            models[name] = GPT(get_config(name), backend="cuda", precision="bf16")
        r = profile_case(models[name], int(batch), args.position, 200)
        lines += report(name, int(batch), args.position, r)
        print("\n".join(lines[-len(r["ops"]) - 5:]), flush=True)
    if args.out:
        with open(args.out, "w") as f:
            f.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
