"""Fill the trainer's kernel cache ($MICROGPT_CACHE_DIR/kernels, which tools/bench.py reads)
with the kernels of a bench geometry's bf16 step, kept and recomputed, so that the bench's
timed run loads them instead of compiling: one eager step of a one-layer model of the
geometry's width, heads and batch (the kernels depend on those, not on the depth).

    python warm.py --geometries gpt2-medium gpt2-xl
"""
import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tools"))
from benchmarks.steps import GEOMETRIES                 # noqa: E402
from microgpt import GPT, get_config                    # noqa: E402
from microgpt.data import default_cache_dir             # noqa: E402
from microgpt.kernels import cache as kernel_cache      # noqa: E402
from microgpt.optim import AdamW, AdamWConfig           # noqa: E402
from microgpt.step import Step                          # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--geometries", nargs="+", default=["gpt2-medium", "gpt2-xl"])
    args = parser.parse_args()
    kernel_cache.use(default_cache_dir() / "kernels")
    for label, name, overrides, B, T in GEOMETRIES:
        if label not in args.geometries:
            continue
        cfg = get_config(name, **{**overrides, "n_layer": 1})
        rng = np.random.default_rng(0)
        tokens, targets = (rng.integers(0, cfg.vocab_size, (B, T)) for _ in range(2))
        for recompute in (False, True):
            t0 = time.perf_counter()
            model = GPT(cfg, backend="cuda", precision="bf16", recompute=recompute)
            step = Step(model, AdamW(model, AdamWConfig()), B, T, graph=False)
            step.run(tokens, targets)
            loss = step.metrics()["loss"][0]
            print(f"{label} (1 layer), recompute {recompute}: loss {loss:.4f}, "
                  f"{time.perf_counter() - t0:.1f} s", flush=True)
            model = step = None


if __name__ == "__main__":
    main()
