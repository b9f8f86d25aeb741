"""Run under mpiexec by tests/test_distributed.py: k data-parallel training steps
(microgpt.step.Step with the world's gradient sync) on the given backend, each rank taking
its slice of the same global batches; rank r saves its parameters to OUT/params-r.npz.

    python dp_worker.py OUT BACKEND SECONDS

A rank still running after SECONDS prints every thread's stack and exits with status 1,
and a rank that mpiexec ends (SIGTERM, once another has failed) prints its stacks too: a
hang then says where each rank waits, and no rank outlives the test that started it.
Each rank also logs on stderr when each step is enqueued and when the device is done."""
import faulthandler
import signal
import sys
import time

import numpy as np

from microgpt import GPT, get_config
from microgpt import distributed
from microgpt.optim import AdamW, AdamWConfig
from microgpt.step import Step


def global_batches(cfg, batch, T, steps):
    rng = np.random.default_rng(123)
    for _ in range(steps):
        tokens = rng.integers(0, cfg.vocab_size, (batch, T + 1))
        yield tokens[:, :-1], tokens[:, 1:]


def train(world, out_dir, backend="numpy", global_batch=4, T=8, steps=3):
    """On cuda the three steps are eager, captured and replayed: the all-reduce runs in
    all three ways."""
    started = time.perf_counter()

    def log(what):
        print(f"rank {world.rank}: {what} at {time.perf_counter() - started:.1f} s",
              file=sys.stderr, flush=True)

    cfg = get_config("microgpt", vocab_size=32)
    model = GPT(cfg, backend=backend, seed=5)
    opt = AdamW(model, AdamWConfig(lr=3e-3, warmup_steps=1, total_steps=steps))
    local = global_batch // world.world_size
    rows = slice(world.rank * local, (world.rank + 1) * local)
    step = Step(model, opt, local, T, sync=world.gradient_sync(model))
    for i, (idx, targets) in enumerate(global_batches(cfg, global_batch, T, steps)):
        step.run(idx[rows], targets[rows])
        log(f"step {i + 1} enqueued")
    params = model.state_dict()
    log("parameters read back")
    np.savez(f"{out_dir}/params-{world.rank}.npz", **params)


if __name__ == "__main__":
    out, backend, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
    faulthandler.register(signal.SIGTERM, chain=True)
    faulthandler.dump_traceback_later(seconds, exit=True)
    train(distributed.init(backend), out, backend)
