"""Training steps built to be timed against each other in one process: each variant's
step built, compiled and captured while its switches are set (the CUDA graph keeps the
kernels it captured, so a routing patched during the build stays that variant's), then
the variants timed in alternating rounds, each figure the best round's, so that a drift
of the machine's clocks weighs on all of them alike."""
import contextlib
import time
from unittest import mock

import numpy as np


def built_step(config, B, T, batches, *, backend="cuda", deterministic=False,
               precision="bf16", patches=(), say=print):
    """A Step of config (a ModelConfig) on B x T batches, run once eagerly on batches[0]
    (compiling) and once on batches[1] (capturing, on the CUDA backend), with each of
    patches ((object, attribute, value)) in force meanwhile. say(line) reports the
    seconds it took, unless None."""
    from microgpt import GPT
    from microgpt.backend import get_backend
    from microgpt.optim import AdamW, AdamWConfig
    from microgpt.step import Step

    t0 = time.perf_counter()
    with contextlib.ExitStack() as stack:
        for owner, name, value in patches:
            stack.enter_context(mock.patch.object(owner, name, value))
        model = GPT(config, backend=get_backend(backend, deterministic=deterministic),
                    precision=precision)
        step = Step(model, AdamW(model, AdamWConfig(total_steps=10**6)), B, T)
        for inputs, targets in batches[:2]:
            step.run(inputs, targets)
        step.metrics()
    if say:
        say(f"built, compiled and captured in {time.perf_counter() - t0:.1f} s")
    return step


def step_seconds(step, batches, reps):
    """Seconds a step over reps runs (replays, once captured), cycling through batches,
    read back once at the end: the host never waits for the device between steps."""
    step.run(*batches[-1])
    step.metrics()
    t0 = time.perf_counter()
    for i in range(reps):
        step.run(*batches[i % len(batches)])
    step.metrics()                  # the one read back: waits for the device
    return (time.perf_counter() - t0) / reps


def best_of_rounds(steps, batches, reps, rounds):
    """{name: step} -> {name: the fewest seconds a step of any round}, the variants
    alternating round after round."""
    best = dict.fromkeys(steps, np.inf)
    for _ in range(rounds):
        for name, step in steps.items():
            best[name] = min(best[name], step_seconds(step, batches, reps))
    return best
