"""Issue 26 parity: the bf16 captured training step's tokens/s (best of rounds) for the tree
on PYTHONPATH. Prints one line per config: `parity CONFIG B T tok_s rounds`."""
import sys, time
import numpy as np
from microgpt import GPT, get_config
from microgpt.optim import AdamW, AdamWConfig
from microgpt.step import Step

label = sys.argv[1]
rounds, reps = 4, 20
for name, B, T in (("andrea-120m", 16, 1024), ("andrea-12m", 64, 256)):
    cfg = get_config(name)
    rng = np.random.default_rng(0)
    idx, tgt = (rng.integers(0, cfg.vocab_size, (B, T)).astype(np.int32) for _ in range(2))
    model = GPT(cfg, backend="cuda", precision="bf16")
    step = Step(model, AdamW(model, AdamWConfig(total_steps=10**6)), B, T, graph=True)
    for _ in range(3):
        step.run(idx, tgt)
    step.metrics()
    got = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(reps):
            step.run(idx, tgt)
        step.metrics()
        got.append(B * T * reps / (time.perf_counter() - t0))
    print(f"parity {label} {name} B{B} T{T} best {max(got):.0f} tok/s rounds {[round(g) for g in got]}", flush=True)
    model = step = None
