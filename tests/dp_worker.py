"""Run under mpiexec by tests/test_distributed.py: k data-parallel training steps
(microgpt.step.Step with the world's gradient sync) on the given backend, each rank taking
its slice of the same global batches; rank r saves its parameters to OUT/params-r.npz, and
rank 0 the optimizer's moments (whole: under ZeRO-1 gathered from the ranks) and the
steps' gradient norms to OUT/optimizer.npz.

    python dp_worker.py OUT BACKEND SECONDS ZERO

ZERO 1 shards the optimizer over the ranks (microgpt.zero.ShardedAdamW), 0 does not.

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
from microgpt.zero import ShardedAdamW


def global_batches(cfg, batch, T, steps):
    rng = np.random.default_rng(123)
    for _ in range(steps):
        tokens = rng.integers(0, cfg.vocab_size, (batch, T + 1))
        yield tokens[:, :-1], tokens[:, 1:]


def train(world, out_dir, backend="numpy", zero=False, global_batch=4, T=8, steps=3):
    """On cuda the three steps are eager, captured and replayed: the all-reduce (or
    ZeRO-1's reduces, total and gather) runs in all three ways."""
    started = time.perf_counter()

    def log(what):
        print(f"rank {world.rank}: {what} at {time.perf_counter() - started:.1f} s",
              file=sys.stderr, flush=True)

    cfg = get_config("microgpt", vocab_size=32)
    model = GPT(cfg, backend=backend, seed=5)
    adamw = AdamWConfig(lr=3e-3, warmup_steps=1, total_steps=steps)
    if zero:
        opt = ShardedAdamW(model, adamw, world)
        sync = opt.sync
    else:
        opt, sync = AdamW(model, adamw), world.gradient_sync(model)
    local = global_batch // world.world_size
    rows = slice(world.rank * local, (world.rank + 1) * local)
    step = Step(model, opt, local, T, sync=sync)
    for i, (idx, targets) in enumerate(global_batches(cfg, global_batch, T, steps)):
        step.run(idx[rows], targets[rows])
        log(f"step {i + 1} enqueued")
    params = model.state_dict()
    moments, _ = opt.state_dict()
    log("parameters read back")
    np.savez(f"{out_dir}/params-{world.rank}.npz", **params)
    if world.rank == 0:
        np.savez(f"{out_dir}/optimizer.npz", grad_norm=step.metrics()["grad_norm"], **moments)


if __name__ == "__main__":
    out, backend, seconds, zero = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
    faulthandler.register(signal.SIGTERM, chain=True)
    faulthandler.dump_traceback_later(seconds, exit=True)
    train(distributed.init(backend), out, backend, zero == "1")
