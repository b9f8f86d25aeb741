"""The captured bf16 step with and without this session's GEMM changes, built in one
process and timed in alternating rounds (tools/benchmarks/captured_steps.py: each figure
the best round's), on uniform tokens. A variant is a set of patches in force while its step
is built and captured (the graph keeps what it captured).

    [VARIANTS=name,name] python3 step_ab.py CONFIG B T REPS ROUNDS
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "tools"))
from benchmarks.captured_steps import best_of_rounds, built_step  # noqa: E402
from benchmarks.token_batches import batches  # noqa: E402

from microgpt import get_config  # noqa: E402
from microgpt.data import default_cache_dir  # noqa: E402
from microgpt.kernels import cache as kernel_cache  # noqa: E402
from microgpt.kernels.gemm import launch  # noqa: E402

CONFIG, B, T, REPS, ROUNDS = (sys.argv[1], *map(int, sys.argv[2:6]))
# name -> the patches while the step is built
VARIANTS = {"programmatic GEMM launches": [(launch, "DEPENDENT_LAUNCH", True)],
            "plain launches": [(launch, "DEPENDENT_LAUNCH", False)]}
if os.environ.get("VARIANTS"):
    VARIANTS = {name: VARIANTS[name] for name in os.environ["VARIANTS"].split(",")}
kernel_cache.use(default_cache_dir() / "kernels")

cfg = get_config(CONFIG)
data = batches("uniform", cfg.vocab_size, 4, B, T)
steps = {name: built_step(cfg, B, T, data, patches=patches,
                          say=lambda line, name=name: print(f"{name}: {line}", flush=True))
         for name, patches in VARIANTS.items()}
best = best_of_rounds(steps, data, REPS, ROUNDS)
first = next(iter(best))
print(f"{CONFIG}, B {B} x {T}, bf16 captured, uniform tokens ({ROUNDS} rounds of {REPS}):",
      flush=True)
for name, seconds in best.items():
    print(f"  {name}: {seconds * 1e3:.3f} ms, {B * T / seconds:,.0f} tokens/s, "
          f"{100 * (seconds / best[first] - 1):+.2f}% against {first}", flush=True)
