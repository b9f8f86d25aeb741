"""The generate bench's greedy and sampled tokens/s (200 new tokens after 16, the prefill
included) and the captured step's replay time at each variant FEW:MANY:KEYS, the skinny
products' k-blocks a warp loads at once (skinny.MMA_UNROLL below MANY_ROWS rows,
MMA_UNROLL_MANY from them on) and attention_decode's keys a split (decode.THREADS), in
one process; the step times interleave the variants (ROUNDS rounds of REPLAYS replays
each, at the same positions).

    python rule_sweep.py OUT.md [--variants 2:2:128 3:6:128 3:6:256] [--cases ...]

Run from the repository root. --tokens 2 only compiles (a warm-up of the kernel cache)."""
import argparse
import sys
import time
import warnings

sys.path.insert(0, "tools")
import numpy as np                                                      # noqa: E402
from numba.core.errors import NumbaPerformanceWarning                   # noqa: E402

from benchmarks.generate import SAMPLED, _timed                         # noqa: E402
from microgpt import GPT, get_config                                    # noqa: E402
from microgpt.data import default_cache_dir                             # noqa: E402
from microgpt.generate import Decoder, Sampling, generate               # noqa: E402
from microgpt.kernels import cache as kernel_cache                      # noqa: E402
from microgpt.kernels.attention import decode                           # noqa: E402
from microgpt.kernels.gemm import skinny                                # noqa: E402

ROUNDS, REPLAYS = 5, 40         # 16 + 200 positions: within andrea-12m's cache of 256
GREEDY = Sampling(temperature=0.0, top_k=0)
PROMPT = 16


def use(variant):
    skinny.MMA_UNROLL, skinny.MMA_UNROLL_MANY, decode.THREADS = variant


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--variants", nargs="+", default=["2:2:128", "3:6:128", "3:6:256"])
    parser.add_argument("--cases", nargs="+", default=["andrea-120m:1", "andrea-120m:16"])
    parser.add_argument("--tokens", type=int, default=200)
    args = parser.parse_args()
    variants = [tuple(map(int, v.split(":"))) for v in args.variants]
    cases = [(name, int(batch)) for name, batch in (c.split(":") for c in args.cases)]
    warnings.simplefilter("ignore", NumbaPerformanceWarning)
    kernel_cache.use(default_cache_dir() / "kernels")
    models = {name: GPT(get_config(name), backend="cuda", precision="bf16")
              for name in sorted({name for name, _ in cases})}
    lines = [f"Command: `python {' '.join(sys.argv)}`", "",
             "| MMA_UNROLL : MMA_UNROLL_MANY : keys a split | case | step µs (graph, best round) | rounds µs "
             "| greedy tok/s | sampled tok/s |", "|---|---|---:|---|---:|---:|"]
    for name, batch in cases:
        t0 = time.perf_counter()
        model = models[name]
        ops = model.backend
        rng = np.random.default_rng(0)
        prompts = [list(rng.integers(0, model.config.vocab_size, PROMPT)) for _ in range(batch)]
        steppers = {}
        for variant in variants:            # each its own captured step
            use(variant)
            decoder = Decoder(model, batch)
            decoder.start_many(list(range(batch)), prompts, [10**6] * batch, [0] * batch)
            decoder.step(GREEDY)
            decoder.step(GREEDY)
            steppers[variant] = decoder
        times = {variant: [] for variant in variants}
        for _ in range(ROUNDS if args.tokens > 2 else 1):
            for variant, decoder in steppers.items():
                ops.synchronize()
                start = time.perf_counter()
                for _ in range(REPLAYS):
                    decoder.step(GREEDY)
                ops.synchronize()
                times[variant].append(1e6 * (time.perf_counter() - start) / REPLAYS)
        for variant in variants:
            use(variant)
            decoder = Decoder(model, batch)
            rates = [batch * args.tokens / _timed(lambda: generate(
                model, prompts, args.tokens, sampling, decoder=decoder))
                for sampling in (GREEDY, Sampling(**SAMPLED))]
            lines.append(f"| {':'.join(map(str, variant))} | {name}:{batch} | "
                         f"{min(times[variant]):.1f} | "
                         f"{' '.join(f'{t:.0f}' for t in times[variant])} | "
                         f"{rates[0]:,.0f} | {rates[1]:,.0f} |")
            print(lines[-1], flush=True)
        print(f"({name}:{batch}: {time.perf_counter() - t0:.1f} s)", flush=True)
        with open(args.out, "w") as f:
            f.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
