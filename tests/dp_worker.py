"""Run under mpiexec by tests/test_distributed.py: k data-parallel AdamW steps on the numpy
backend, each rank taking its slice of the same global batches; rank r saves its
parameters to OUT/params-r.npz."""
import sys

import numpy as np

from microgpt import GPT, get_config
from microgpt import distributed
from microgpt.optim import AdamW, AdamWConfig, lr_at


def global_batches(cfg, batch, T, steps):
    rng = np.random.default_rng(123)
    for _ in range(steps):
        tokens = rng.integers(0, cfg.vocab_size, (batch, T + 1))
        yield tokens[:, :-1], tokens[:, 1:]


def train(world, out_dir, global_batch=4, T=8, steps=3):
    cfg = get_config("microgpt", vocab_size=32)
    model = GPT(cfg, backend="numpy", seed=5)
    opt_cfg = AdamWConfig(lr=3e-3, warmup_steps=1, total_steps=steps)
    opt = AdamW(model, opt_cfg)
    local = global_batch // world.world_size
    rows = slice(world.rank * local, (world.rank + 1) * local)
    for step, (idx, targets) in enumerate(global_batches(cfg, global_batch, T, steps)):
        model.forward_backward(idx[rows], targets[rows])
        world.allreduce_mean(model.grads_flat, model.backend)
        opt.step(lr_at(step, opt_cfg))
    np.savez(f"{out_dir}/params-{world.rank}.npz", **model.state_dict())


if __name__ == "__main__":
    train(distributed.init("numpy"), sys.argv[1])
