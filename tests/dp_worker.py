"""Run under mpiexec by tests/test_distributed.py: k data-parallel training steps
(microgpt.step.Step with the world's gradient sync) on the given backend, each rank taking
its slice of the same global batches; rank r saves its parameters to OUT/params-r.npz."""
import sys

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
    cfg = get_config("microgpt", vocab_size=32)
    model = GPT(cfg, backend=backend, seed=5)
    opt = AdamW(model, AdamWConfig(lr=3e-3, warmup_steps=1, total_steps=steps))
    local = global_batch // world.world_size
    rows = slice(world.rank * local, (world.rank + 1) * local)
    step = Step(model, opt, local, T, sync=world.gradient_sync(model))
    for idx, targets in global_batches(cfg, global_batch, T, steps):
        step.run(idx[rows], targets[rows])
    np.savez(f"{out_dir}/params-{world.rank}.npz", **model.state_dict())


if __name__ == "__main__":
    out, backend = sys.argv[1], sys.argv[2]
    train(distributed.init(backend), out, backend)
