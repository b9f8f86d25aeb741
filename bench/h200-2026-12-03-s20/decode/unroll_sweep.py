"""The generate bench's cases (tools/bench.py --only generate: greedy and sampled tokens/s,
200 new tokens after 16, the prefill included) and the captured step's replay time at each
count of k-blocks a skinny bf16 warp loads at once (skinny.MMA_UNROLL), in one process.

    python unroll_sweep.py OUT.md [--unrolls 6 2 4 3] [--tokens 200]

Run from the repository root. --tokens 2 only compiles (a warm-up of the kernel cache)."""
import argparse
import sys
import time
import warnings

sys.path.insert(0, "tools")
import numpy as np                                                      # noqa: E402
from numba.core.errors import NumbaPerformanceWarning                   # noqa: E402

from benchmarks.generate import CASES, SAMPLED, _timed                  # noqa: E402
from microgpt import GPT, get_config                                    # noqa: E402
from microgpt.data import default_cache_dir                             # noqa: E402
from microgpt.generate import Decoder, Sampling, generate               # noqa: E402
from microgpt.kernels import cache as kernel_cache                      # noqa: E402
from microgpt.kernels.gemm import skinny                                # noqa: E402

REPLAYS = 100


def step_us(model, batch, prompts):
    """The captured greedy step replayed back to back, µs a step."""
    decoder = Decoder(model, batch)
    decoder.start_many(list(range(batch)), prompts, [10**6] * batch, [0] * batch)
    greedy = Sampling(temperature=0.0, top_k=0)
    decoder.step(greedy)
    decoder.step(greedy)
    model.backend.synchronize()
    t0 = time.perf_counter()
    for _ in range(REPLAYS):
        decoder.step(greedy)
    model.backend.synchronize()
    return 1e6 * (time.perf_counter() - t0) / REPLAYS


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--unrolls", type=int, nargs="+", default=[6, 2, 4, 3])
    parser.add_argument("--tokens", type=int, default=200)
    args = parser.parse_args()
    warnings.simplefilter("ignore", NumbaPerformanceWarning)
    kernel_cache.use(default_cache_dir() / "kernels")
    models = {name: GPT(get_config(name), backend="cuda", precision="bf16")
              for name in sorted({c[0] for c in CASES})}
    lines = [f"Command: `python {' '.join(sys.argv)}`", "",
             "| MMA_UNROLL | case | step µs (graph) | greedy tok/s | sampled tok/s |",
             "|---:|---|---:|---:|---:|"]
    for unroll in args.unrolls:
        skinny.MMA_UNROLL = unroll
        for name, batch, prompt in CASES:
            model = models[name]
            rng = np.random.default_rng(0)
            prompts = [list(rng.integers(0, model.config.vocab_size, prompt))
                       for _ in range(batch)]
            t0 = time.perf_counter()
            graph = step_us(model, batch, prompts)
            decoder = Decoder(model, batch)
            rates = [batch * args.tokens / _timed(lambda: generate(
                model, prompts, args.tokens, sampling, decoder=decoder))
                for sampling in (Sampling(temperature=0.0, top_k=0), Sampling(**SAMPLED))]
            lines.append(f"| {unroll} | {name}:{batch} | {graph:.1f} | {rates[0]:,.0f} | "
                         f"{rates[1]:,.0f} |")
            print(lines[-1], f"({time.perf_counter() - t0:.1f} s)", flush=True)
            with open(args.out, "w") as f:
                f.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
