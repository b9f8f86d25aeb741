#!/usr/bin/env python3
"""Where a decoding step's GPU time goes: every op of one step of microgpt.generate, timed
on the device, with the bytes it must move and the bandwidth that makes.

    python tools/profile_decode.py --out /tmp/decode.md                 # the bench's cases
    python tools/profile_decode.py --both --generate /tmp/generate.md   # and the bench

Per case (config:batch; by default the generate bench's: andrea-120m at batch 1 and 16,
andrea-12m at 1), in bf16: B random prompts of 16 tokens (the bench's) are prefilled,
the captured step is replayed REPLAYS times back to back (its time per step), which
takes the sequences to position ~116 (the bench's mean, 16 + 200 / 2); then one eager
step runs behind a spin kernel with an event between every two ops (tools/profile_step.py's
method: the device runs them back to back, as the graph does). Each op's bytes are those
it cannot avoid: its operands once (a GEMM's weights, its rows in and out), the KV cache
up to each sequence's position, the embedding rows of the tokens. sample_tokens is also
timed at the sampled setting (temperature 0.8, top-k 40). --prompt 1 runs no prefill (the
sequences start at position 0), so that only the step's kernels compile.

--generate runs tools/bench.py's generate section after the profiles, in the same
process, so that every kernel compiles once (--transformers adds transformers' rates
beside); --both then profiles again with the skinny products on the CUDA cores' kernels
(kernels/gemm/skinny.py's TENSOR_CORES off), to compare. Compiled kernels are kept in
the trainer's cache ($MICROGPT_CACHE_DIR/kernels).
"""
import argparse
import collections
import sys
import time
import warnings

import numpy as np
from profile_step import behind_spin, group, instrumented, op_times

GREEDY = dict(temperature=0.0, top_k=0)
SAMPLED = dict(temperature=0.8, top_k=40)
PEAK_GBS = 4800         # the H200's HBM3e, GB/s
REPLAYS = 100           # of the captured step, timed back to back
PROMPT = 16             # tokens, as the generate bench's


def nbytes(x):
    return x.nbytes if hasattr(x, "nbytes") and hasattr(x, "shape") else 0


def bytes_moved(name, args, positions):
    """The bytes an op must read and write at least (see the module's docstring)."""
    if name == "attention_decode":                  # out, kv, qkv, seq, n_head
        out, kv, qkv, seq = args[:4]
        width = kv.shape[2]
        read = sum(int(p) + 1 for p in positions) * width * kv.dtype.itemsize
        return read + nbytes(out) + nbytes(qkv) + nbytes(seq)
    if name == "decode_embedding":                  # out, seq, wte, wpe: a row of each
        out, seq, wte, wpe = args[:4]
        B = out.shape[0]
        C = out.size // B
        return nbytes(out) + nbytes(seq) + B * C * (wte.dtype.itemsize + wpe.dtype.itemsize)
    return sum(nbytes(a) for a in args)


def profile_case(model, batch, prompt=PROMPT):
    """One case's figures -> dict: ops [(label, calls, µs, bytes)], graph_us (the captured
    step), position (of the profiled step), sampled_us (sample_tokens at SAMPLED)."""
    from microgpt.generate import Decoder, Sampling
    from microgpt.reference import POSITION

    cfg, ops = model.config, model.backend
    rng = np.random.default_rng(0)
    prompts = [list(rng.integers(0, cfg.vocab_size, prompt)) for _ in range(batch)]
    greedy, sampled = Sampling(**GREEDY), Sampling(**SAMPLED)
    decoder = Decoder(model, batch)
    decoder.start_many(list(range(batch)), prompts, [10**6] * batch, [0] * batch)
    decoder.step(greedy)            # eager: compiles
    decoder.step(greedy)            # captures
    ops.synchronize()
    t0 = time.perf_counter()
    for _ in range(REPLAYS):
        decoder.step(greedy)
    ops.synchronize()
    result = dict(graph_us=1e6 * (time.perf_counter() - t0) / REPLAYS)

    decoder.graph = False
    for label, sampling in (("greedy", greedy), ("sampled", sampled)):
        positions = decoder.state()[:, POSITION]
        with instrumented(ops) as marks:
            end = behind_spin(ops, marks, lambda: decoder.step(sampling), ops.synchronize)
            times = op_times(marks, end)
        if label == "sampled":
            result["sampled_us"] = 1e3 * sum(ms for m, ms in times if m[1] == "sample_tokens")
            continue
        totals, counts, _ = group(times)
        moved = collections.defaultdict(int)
        for (lab, name, args, _), _ms in times:
            moved[lab] += bytes_moved(name, args, positions)
        result["position"] = int(positions.mean())
        result["ops"] = [(lab, counts[lab], 1e3 * ms, moved[lab])
                         for lab, ms in sorted(totals.items(), key=lambda kv: -kv[1])]
    return result


def report(name, batch, r, where):
    ops = r["ops"]
    total_us = sum(us for _, _, us, _ in ops)
    total_bytes = sum(b for *_, b in ops)
    launches = sum(c for _, c, _, _ in ops)
    lines = [f"## {name}, batch {batch}, bf16, at position {r['position']}{where}", "",
             f"Sum of the ops: {total_us:.1f} µs for {launches} launches, "
             f"{total_bytes / 1e6:.1f} MB ({total_bytes / total_us / 1e3:,.0f} GB/s; the "
             f"memory bound {total_bytes / PEAK_GBS / 1e3:.1f} µs at {PEAK_GBS} GB/s). "
             f"The captured step replayed: {r['graph_us']:.1f} µs "
             f"({batch * 1e6 / r['graph_us']:,.0f} tok/s). sample_tokens sampled "
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
    parser.add_argument("--both", action="store_true",
                        help="again with the skinny products in bf16 on the CUDA cores' "
                        "kernels (kernels/gemm/skinny.py's TENSOR_CORES off), to compare")
    parser.add_argument("--generate", metavar="FILE",
                        help="then the generate bench, its section written to FILE")
    parser.add_argument("--tokens", type=int, default=200,
                        help="the generate bench's new tokens per sequence (default 200)")
    parser.add_argument("--transformers", action="store_true",
                        help="the generate bench with transformers' rates beside")
    parser.add_argument("--prompt", type=int, default=PROMPT,
                        help=f"prompt tokens (default {PROMPT}, the bench's; 1 runs no prefill, "
                        "so that only the decoding step's kernels compile)")
    parser.add_argument("--out", help="markdown file to write (default: print only)")
    args = parser.parse_args(argv)

    from numba.core.errors import NumbaPerformanceWarning

    from microgpt import GPT, get_config
    from microgpt.backend import cuda_available
    from microgpt.data import default_cache_dir
    from microgpt.kernels import cache as kernel_cache
    from microgpt.kernels.gemm import skinny

    warnings.simplefilter("ignore", NumbaPerformanceWarning)   # small grids: decoding's
    if not cuda_available():
        print("profile_decode.py: no CUDA GPU found; it times kernels on one", file=sys.stderr)
        return 2
    kernel_cache.use(default_cache_dir() / "kernels")      # the trainer's compiled kernels
    command = f"`python tools/profile_decode.py {' '.join(argv or sys.argv[1:])}`"
    lines = ["# Decoding step profile", "", f"Command: {command}", ""]
    models = {}

    def profile(tensor_cores):
        skinny.TENSOR_CORES = tensor_cores
        where = "" if tensor_cores else ", the skinny products on the CUDA cores"
        for case in args.cases:
            name, batch = case.split(":")
            if name not in models:
                models[name] = GPT(get_config(name), backend="cuda", precision="bf16")
            r = profile_case(models[name], int(batch), args.prompt)
            lines.extend(report(name, int(batch), r, where))
            print("\n".join(lines[-len(r["ops"]) - 5:]), flush=True)
            if args.out:
                with open(args.out, "w") as f:
                    f.write("\n".join(lines) + "\n")
        skinny.TENSOR_CORES = True

    profile(True)
    if args.generate:
        from benchmarks.generate import bench_generate, generate_report

        rows = bench_generate("cuda", args.tokens, transformers=args.transformers)
        with open(args.generate, "w") as f:
            f.write("\n".join([f"Command: {command}", ""] + generate_report(rows, "cuda")))
    if args.both:
        profile(False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
