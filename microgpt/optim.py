"""AdamW on the model's flat parameter buffer, and the learning-rate schedule."""
import math
from dataclasses import dataclass

import numpy as np

from microgpt import reference as ref
from microgpt.ops import HPARAMS


@dataclass(frozen=True)
class AdamWConfig:
    lr: float = 6e-4
    beta1: float = 0.9
    beta2: float = 0.95
    eps: float = 1e-8
    weight_decay: float = 0.1    # matrices only
    max_norm: float = 1.0        # global-norm gradient clip
    warmup_steps: int = 0
    total_steps: int = 1
    min_lr_ratio: float = 0.1    # cosine decays to this fraction of lr


def lr_at(step, cfg):
    """The learning rate of step (counting from 0) under cfg's schedule: linear warmup to
    cfg.lr over warmup_steps, then cosine decay to min_lr_ratio * lr at total_steps."""
    return ref.lr_schedule(step, lr=cfg.lr, warmup_steps=cfg.warmup_steps,
                           total_steps=cfg.total_steps, min_lr_ratio=cfg.min_lr_ratio)


class AdamW:
    """Moments live beside the parameters, on the model's backend, as flat buffers; so do
    the squared gradient norm and the hyper-parameters of the next update (ops.HPARAMS),
    which the device advances itself: update() enqueues a whole optimizer step without
    a value from the host, and the same launches replay in a captured step.

    span (lo, hi) is the range of the flat buffers it updates and keeps moments for: all
    of them, or a ZeRO-1 rank's shard (microgpt.zero.ShardedAdamW, which adds the
    collectives around the same launches)."""

    def __init__(self, model, cfg, span=None):
        self.model, self.cfg = model, cfg
        self.span = span or (0, model.layout.size)
        ops = model.backend
        self.m = ops.zeros((self.span[1] - self.span[0],))
        self.v = ops.zeros((self.span[1] - self.span[0],))
        self.norm_squared = ops.zeros((1,))
        self.hparams = ops.zeros((len(HPARAMS),))
        self.step_count = 0        # steps taken; the next update is number step_count + 1

    def update(self):
        """Enqueue one update on the scheduled learning rate: the next hyper-parameters,
        the gradient's norm, the clip and AdamW. Nothing is read back, and step_count is
        left to the caller (microgpt.step.Step counts the updates it replays)."""
        ops, cfg = self.model.backend, self.cfg
        ops.adamw_schedule(self.hparams, lr=cfg.lr, warmup_steps=cfg.warmup_steps,
                           total_steps=cfg.total_steps, min_lr_ratio=cfg.min_lr_ratio,
                           beta1=cfg.beta1, beta2=cfg.beta2)
        self._update()

    def step(self, lr):
        """One update at learning rate lr, set from the host; returns the gradient's norm
        before clipping (one float copied back). For tests and single steps: the trainer
        runs update() inside a microgpt.step.Step."""
        ops, cfg = self.model.backend, self.cfg
        n = self.step_count + 1
        ops.copy(self.hparams, ops.to_device(
            np.array([n, lr, 1.0 - cfg.beta1 ** n, 1.0 - cfg.beta2 ** n])))
        self._update()
        self.step_count += 1
        return math.sqrt(float(ops.to_host(self.norm_squared)[0]))

    def _update(self):
        ops, model, cfg = self.model.backend, self.model, self.cfg
        lo, hi = self.span
        grads = model.grads_flat[lo:hi]
        self._norm_squared(grads)
        # the span's first n_decay elements are matrices (the layout's decayed prefix)
        n_decay = min(max(model.layout.n_decay - lo, 0), hi - lo)
        ops.adamw_update(model.params_flat[lo:hi], grads, self.m, self.v,
                         self.norm_squared, self.hparams, weight_decay=cfg.weight_decay,
                         n_decay=n_decay, max_norm=cfg.max_norm,
                         beta1=cfg.beta1, beta2=cfg.beta2, eps=cfg.eps,
                         param_bf16=None if model.matrices_flat is None
                         else model.matrices_flat[lo:lo + n_decay])

    def _norm_squared(self, grads):
        """self.norm_squared = the squared norm of the whole gradient (grads: the span's)."""
        self.model.backend.global_norm_squared(self.norm_squared, grads)

    def state_dict(self):
        ops = self.model.backend
        return {"m": ops.to_host(self.m), "v": ops.to_host(self.v)}, {"step": self.step_count}

    def load_state_dict(self, moments, meta):
        """moments: the whole m and v, as state_dict gives them (of a run at any world
        size, with ZeRO-1 or without): the optimizer keeps its span of them."""
        ops = self.model.backend
        lo, hi = self.span
        for name in ("m", "v"):
            if moments[name].shape != (self.model.layout.size,):
                raise ValueError(f"optimizer moment {name} has shape {moments[name].shape}, "
                                 f"the model has {self.model.layout.size} parameters")
            ops.copy(getattr(self, name), ops.to_device(moments[name][lo:hi]))
        self.step_count = int(meta["step"])
        # the schedule continues from the restored step
        ops.copy(self.hparams, ops.to_device(np.array([self.step_count, 0.0, 0.0, 0.0])))
