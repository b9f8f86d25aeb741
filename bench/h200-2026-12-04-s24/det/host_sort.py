"""What the deterministic embedding backward's sort costs the host (kernels.embedding
.token_runs, made as a training batch is copied in: microgpt.step.Step.load): the best of
REPS calls on each of 4 batches of a token shard, and a whole Step.load's host part
beside the default's (the rows stacked and cast; the copy's own time not counted: a
NumPy backend's copy is an assignment). No GPU.

    python3 host_sort.py TOKENS VOCAB B T [REPS]
"""
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..",
                                "tools"))
from benchmarks.token_batches import batches, describe  # noqa: E402

from microgpt import GPT, get_config  # noqa: E402
from microgpt.kernels.embedding import token_runs  # noqa: E402
from microgpt.optim import AdamW, AdamWConfig  # noqa: E402
from microgpt.step import Step  # noqa: E402

TOKENS, VOCAB, B, T = sys.argv[1], *map(int, sys.argv[2:5])
REPS = int(sys.argv[5]) if len(sys.argv) > 5 else 50


def best_ms(call):
    best = np.inf
    for _ in range(REPS):
        t0 = time.perf_counter()
        call()
        best = min(best, time.perf_counter() - t0)
    return best * 1e3


data = batches(TOKENS, VOCAB, 4, B, T)
print(f"numpy {np.__version__}; {TOKENS}, vocab {VOCAB}, B {B} x {T}: "
      + "; ".join(describe(x) for x, _ in data))
print("token_runs, ms: " + ", ".join(f"{best_ms(lambda: token_runs(x)):.3f}" for x, _ in data))
model = GPT(get_config("microgpt", vocab_size=VOCAB, context=T), backend="numpy")
step = Step(model, AdamW(model, AdamWConfig()), B, T)
plain = best_ms(lambda: step.load(*data[0], step.buffers.batch))
model.token_runs = token_runs        # as a deterministic backend's model has it
sorted_step = Step(model, AdamW(model, AdamWConfig()), B, T)
with_runs = best_ms(lambda: sorted_step.load(*data[0], sorted_step.buffers.batch))
print(f"Step.load on the host, ms: default {plain:.3f}, with token_runs {with_runs:.3f}")
