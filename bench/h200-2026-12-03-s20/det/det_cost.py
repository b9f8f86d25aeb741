"""--deterministic's cost at andrea-120m (issue 31's target: a step at most 3% slower) on a
text's tokens: microgpt's captured bf16 step (B 16 x 1024) on the default backend against a
deterministic one, as session 19's det_cost.py measured it on uniform tokens, here on
batches of the token shard given (or uniform / zipf), the steps cycling through BATCHES
of them; the rounds alternate, each figure the best round's.

    python3 det_cost.py REPS ROUNDS VOCABS TOKENS [s19]
        # TOKENS uniform, zipf or a .bin shard; REPS 1 ROUNDS 1: compile into the cache only;
        # s19: a third step, deterministic with session 19's embedding backward
        # (batches.session19_backward: kernels/embedding.py at d6ee3c2)
"""
import sys
import time

import types

import numpy as np

from batches import batches, describe, session19_backward
from microgpt import GPT, get_config
from microgpt.cuda_backend import CudaBackend, _on_stream
from microgpt.data import default_cache_dir
from microgpt.kernels import cache as kernel_cache
from microgpt.optim import AdamW, AdamWConfig
from microgpt.step import Step

REPS, ROUNDS, VOCABS, TOKENS = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
VARIANTS = {"default": (False, None), "deterministic": (True, None)}
if sys.argv[5:] == ["s19"]:
    VARIANTS["deterministic, s19's embedding"] = (True, session19_backward())
B, T, BATCHES = 16, 1024, 4
kernel_cache.use(default_cache_dir() / "kernels")


def build(vocab, name, data):
    t0 = time.perf_counter()
    deterministic, embedding_backward = VARIANTS[name]
    backend = CudaBackend(deterministic=deterministic)
    if embedding_backward is not None:
        backend.encoder_backward = types.MethodType(_on_stream(embedding_backward), backend)
    cfg = get_config("andrea-120m", vocab_size=vocab)
    model = GPT(cfg, backend=backend, precision="bf16")
    step = Step(model, AdamW(model, AdamWConfig(total_steps=10**6)), B, T)
    for batch in data[:2]:          # compile, then capture
        step.run(*batch)
    step.metrics()
    print(f"vocab {vocab}, {name}: built, compiled and captured in "
          f"{time.perf_counter() - t0:.1f} s", flush=True)
    return step


def seconds(step, data, reps):
    step.run(*data[-1])
    step.metrics()
    t0 = time.perf_counter()
    for i in range(reps):
        step.run(*data[i % len(data)])
    step.metrics()
    return (time.perf_counter() - t0) / reps


for vocab in map(int, VOCABS.split(",")):
    data = batches(TOKENS, vocab, BATCHES, B, T)
    print(f"tokens {TOKENS}, vocab {vocab}: " + "; ".join(describe(x) for x, _ in data),
          flush=True)
    steps = {name: build(vocab, name, data) for name in VARIANTS}
    best = {name: np.inf for name in steps}
    for _ in range(ROUNDS):
        for name, step in steps.items():
            best[name] = min(best[name], seconds(step, data, REPS))
    print(f"andrea-120m vocab {vocab}, B {B} x {T}, bf16 captured, {TOKENS} tokens "
          f"({ROUNDS} rounds of {REPS}):", flush=True)
    for name, seconds_a_step in best.items():
        print(f"  {name}: {seconds_a_step * 1e3:.2f} ms, "
              f"{100 * (seconds_a_step / best['default'] - 1):+.1f}%", flush=True)
    steps = best = None
