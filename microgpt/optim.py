"""AdamW on the model's flat parameter buffer, and the learning-rate schedule."""
import math
from dataclasses import dataclass


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
    """Linear warmup to cfg.lr over warmup_steps, then cosine decay to min_lr_ratio * lr at
    total_steps. step counts from 0."""
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    span = max(1, cfg.total_steps - cfg.warmup_steps)
    progress = min(1.0, (step - cfg.warmup_steps) / span)
    cosine = 0.5 * (1.0 + math.cos(math.pi * progress))
    return cfg.lr * (cfg.min_lr_ratio + (1.0 - cfg.min_lr_ratio) * cosine)


class AdamW:
    """Moments live beside the parameters, on the model's backend, as flat buffers."""

    def __init__(self, model, cfg):
        self.model, self.cfg = model, cfg
        ops = model.backend
        self.m = ops.zeros((model.layout.size,))
        self.v = ops.zeros((model.layout.size,))
        self.norm_squared = ops.zeros((1,))
        self.step_count = 0        # steps taken; the next update is number step_count + 1

    def step(self, lr):
        """Clip the model's gradient to max_norm and update; returns the gradient's norm
        before clipping (one float copied back to the host)."""
        ops, model, cfg = self.model.backend, self.model, self.cfg
        ops.global_norm_squared(self.norm_squared, model.grads_flat)
        self.step_count += 1
        ops.adamw_update(model.params_flat, model.grads_flat, self.m, self.v, self.norm_squared,
                         lr=lr, step=self.step_count, weight_decay=cfg.weight_decay,
                         n_decay=model.layout.n_decay, max_norm=cfg.max_norm,
                         beta1=cfg.beta1, beta2=cfg.beta2, eps=cfg.eps)
        return math.sqrt(float(ops.to_host(self.norm_squared)[0]))

    def state_dict(self):
        ops = self.model.backend
        return {"m": ops.to_host(self.m), "v": ops.to_host(self.v)}, {"step": self.step_count}

    def load_state_dict(self, moments, meta):
        ops = self.model.backend
        for name in ("m", "v"):
            if moments[name].shape != (self.model.layout.size,):
                raise ValueError(f"optimizer moment {name} has shape {moments[name].shape}, "
                                 f"the model has {self.model.layout.size} parameters")
            ops.copy(getattr(self, name), ops.to_device(moments[name]))
        self.step_count = int(meta["step"])
