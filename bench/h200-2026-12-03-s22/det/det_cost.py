"""--deterministic's cost (issue 31's target: a step at most 3% slower): the captured bf16
step on the default backend, on a deterministic one as routed (the ordered split-K by
parts where a tile's splits fill one wave: tuning.ordered_by_parts), on one whose
ordered split-K adds in turns everywhere (session 21's), by parts everywhere (on
tuning.ordered_tile's tiles, or on the atomic split-K's own tiles and splits), on batches of a token shard (or
uniform / zipf tokens), the steps cycling through 4 of them; the rounds alternate, each
figure the best round's (tools/benchmarks/captured_steps.py).

    [VARIANTS=name,name] python3 det_cost.py CONFIG B T REPS ROUNDS VOCAB TOKENS
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "tools"))
from benchmarks.captured_steps import best_of_rounds, built_step  # noqa: E402
from benchmarks.token_batches import batches, describe  # noqa: E402

from microgpt import get_config  # noqa: E402
from microgpt.data import default_cache_dir  # noqa: E402
from microgpt.kernels import cache as kernel_cache  # noqa: E402
from microgpt.kernels.gemm import tuning  # noqa: E402

CONFIG, B, T, REPS, ROUNDS, VOCAB = (sys.argv[1], *map(int, sys.argv[2:7]))
TOKENS = sys.argv[7]
# the default's tile for a weight gradient (its splits follow from it)
ATOMICS_TILE = lambda M, N, K: tuning.default_tile(M, N, K, True, True, False, True)
ROUTED_TILE = tuning.ordered_tile


def one_wave_on_atomics_tile(M, N, K):
    """By parts on the atomics' tile where its splits fill one wave, else in turns."""
    tile = ATOMICS_TILE(M, N, K)
    one_wave = tuning.ordered_by_parts(M, N, K, tile, tuning.default_split_k(M, N, K, tile))
    return tile if one_wave else ROUTED_TILE(M, N, K)


# name -> (deterministic, the routing's patches while the step is built)
VARIANTS = {"default": (False, ()),
            "deterministic": (True, ()),
            "deterministic, in turns (s21's)": (
                True, [(tuning, "ordered_by_parts", lambda *args: False)]),
            "deterministic, by parts everywhere": (
                True, [(tuning, "ordered_by_parts", lambda *args: True)]),
            "deterministic, by parts on the atomics' tiles": (
                True, [(tuning, "ordered_by_parts", lambda *args: True),
                       (tuning, "ordered_tile", ATOMICS_TILE)]),
            "deterministic, by parts on the atomics' tiles where one wave": (
                True, [(tuning, "ordered_tile", one_wave_on_atomics_tile)])}
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
