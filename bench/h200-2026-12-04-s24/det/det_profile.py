"""Where --deterministic's cost lies: every op of one bf16 step timed on the device
(tools/profile_step.py's events between ops, run behind a spin kernel), on the default
backend and on deterministic ones, on batches of a token shard: session 21's routing (the
ordered split-K in turns: routings.py), main's (by parts where one wave) and main's with
session 22's add_parts (routings.py);
each op and operands' best of ROUNDS steps, side by side, the largest differences from
the default first; and each variant's captured step (the best of ROUNDS alternating
rounds of 10: tools/benchmarks/captured_steps.py).

    [VARIANTS=name,name] python3 det_profile.py CONFIG B T VOCAB ROUNDS TOKENS

(session 22's, with det_cost.py's VARIANTS.)
"""
import contextlib
import os
import sys
from unittest import mock

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "tools"))
sys.path.insert(0, HERE)
from benchmarks.captured_steps import best_of_rounds, built_step  # noqa: E402
from benchmarks.token_batches import batches  # noqa: E402
from profile_step import behind_spin, group, instrumented, op_times  # noqa: E402

from microgpt import get_config  # noqa: E402
from microgpt.data import default_cache_dir  # noqa: E402
from microgpt.kernels import cache as kernel_cache  # noqa: E402
from routings import (FEWEST_SPLITS, HALFWAY_SPLITS, SESSION21,  # noqa: E402
                      SESSION22_ADD_PARTS)

CONFIG, B, T, VOCAB, ROUNDS = sys.argv[1], *map(int, sys.argv[2:6])
TOKENS = sys.argv[6]
# name -> (deterministic, the routing's patches while the step is built and profiled)
VARIANTS = {"default": (False, ()), "session 21": (True, SESSION21), "routed": (True, ()),
            "routed with session 22's add_parts": (True, SESSION22_ADD_PARTS),
            "routed by parts in the fewest splits": (True, FEWEST_SPLITS),
            "routed by parts in half-way splits": (True, HALFWAY_SPLITS)}
if os.environ.get("VARIANTS"):          # (names: the keys above, default first)
    VARIANTS = {name: VARIANTS[name] for name in os.environ["VARIANTS"].split(",")}
kernel_cache.use(default_cache_dir() / "kernels")


def profiled(step, patches, data):
    """{op and operands: the fewest ms of ROUNDS eager steps}, {op and operands: calls}."""
    step.graph = False
    best, calls = {}, {}
    with contextlib.ExitStack() as stack:
        for owner, name, value in patches:
            stack.enter_context(mock.patch.object(owner, name, value))
        for r in range(ROUNDS):
            with instrumented(step.backend) as marks:
                end = behind_spin(step.backend, marks, lambda: step.run(*data[r % len(data)]),
                                  step.metrics)
            totals, calls, _ = group(op_times(marks, end))
            for label, ms in totals.items():
                best[label] = min(best.get(label, np.inf), ms)
    return best, calls


data = batches(TOKENS, VOCAB, 4, B, T)
cfg = get_config(CONFIG, vocab_size=VOCAB)
steps = {name: built_step(cfg, B, T, data, deterministic=deterministic, patches=patches,
                          say=lambda line, name=name: print(f"{name}: {line}", flush=True))
         for name, (deterministic, patches) in VARIANTS.items()}
graph = best_of_rounds(steps, data, 10, ROUNDS)
runs = {name: profiled(steps[name], VARIANTS[name][1], data) for name in steps}
d0 = runs["default"][0]
print(f"{CONFIG} vocab {VOCAB}, B {B} x {T}, bf16, {TOKENS} tokens, best of {ROUNDS}")
for name, (d, _) in runs.items():
    print(f"{name}: captured step {graph[name] * 1e3:.3f} ms "
          f"({100 * (graph[name] / graph['default'] - 1):+.1f}%), "
          f"sum of the ops {sum(d.values()):.3f} ms")
print("\n| op and operands | calls | " + " | ".join(f"{n} ms" for n in runs) + " |")
print("|---|---:|" + "---:|" * len(runs))
labels = sorted(set().union(*(d for d, _ in runs.values())),
                key=lambda k: -max(abs(d.get(k, 0) - d0.get(k, 0)) for d, _ in runs.values()))
for label in labels:
    calls = next(c[label] for _, c in runs.values() if label in c)
    print(f"| `{label}` | {calls} | " + " | ".join(
        f"{d.get(label, 0.0):.4f}" for d, _ in runs.values()) + " |")
