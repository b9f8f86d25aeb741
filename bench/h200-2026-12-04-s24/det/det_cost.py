"""--deterministic's cost (issue 31's target: a step at most 3% slower): the captured bf16
step on the default backend, on a deterministic one as routed (the ordered split-K by
parts on the atomics' tile where its splits fill one wave: tuning.ordered_tile), and on
one with session 21's routing (in turns everywhere: routings.py), session 22's
add_parts or the by-parts products in fewer splits (routings.py), on batches of a token
shard (or uniform / zipf tokens), the steps cycling through 4 of them; the rounds
alternate, each figure the best round's (tools/benchmarks/captured_steps.py).

    [VARIANTS=name,name] python3 det_cost.py CONFIG B T REPS ROUNDS VOCAB TOKENS
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "tools"))
sys.path.insert(0, HERE)
from benchmarks.captured_steps import best_of_rounds, built_step  # noqa: E402
from benchmarks.token_batches import batches, describe  # noqa: E402

from microgpt import get_config  # noqa: E402
from microgpt.data import default_cache_dir  # noqa: E402
from microgpt.kernels import cache as kernel_cache  # noqa: E402
from routings import (FEWEST_SPLITS, HALFWAY_SPLITS, SESSION21,  # noqa: E402
                      SESSION22_ADD_PARTS)

CONFIG, B, T, REPS, ROUNDS, VOCAB = (sys.argv[1], *map(int, sys.argv[2:7]))
TOKENS = sys.argv[7]
# name -> (deterministic, the routing's patches while the step is built)
VARIANTS = {"default": (False, ()),
            "deterministic": (True, ()),
            "deterministic, session 21's routing (in turns)": (True, SESSION21),
            "deterministic with session 22's add_parts": (True, SESSION22_ADD_PARTS),
            "deterministic by parts in the fewest splits": (True, FEWEST_SPLITS),
            "deterministic by parts in half-way splits": (True, HALFWAY_SPLITS)}
if os.environ.get("VARIANTS"):          # (names: the keys above, default first)
    VARIANTS = {name: VARIANTS[name] for name in os.environ["VARIANTS"].split(",")}
kernel_cache.use(default_cache_dir() / "kernels")

data = batches(TOKENS, VOCAB, 4, B, T)
print(f"tokens {TOKENS}, vocab {VOCAB}: " + "; ".join(describe(x) for x, _ in data),
      flush=True)
cfg = get_config(CONFIG, vocab_size=VOCAB)
steps = {name: built_step(cfg, B, T, data, deterministic=deterministic, patches=patches,
                          say=lambda line, name=name: print(f"{name}: {line}", flush=True))
         for name, (deterministic, patches) in VARIANTS.items()}
best = best_of_rounds(steps, data, REPS, ROUNDS)
print(f"{CONFIG} vocab {VOCAB}, B {B} x {T}, bf16 captured, {TOKENS} tokens "
      f"({ROUNDS} rounds of {REPS}):", flush=True)
for name, seconds_a_step in best.items():
    print(f"  {name}: {seconds_a_step * 1e3:.2f} ms, "
          f"{100 * (seconds_a_step / best['default'] - 1):+.1f}%", flush=True)
