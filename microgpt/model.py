"""The GPT model, written once against a backend (NumPy or CUDA).

GPT-2 architecture: pre-LayerNorm blocks, learned position embeddings, no biases in the
linear layers, tanh-GELU MLP of width 4C, LM head tied to the token embedding, mean
cross-entropy over all B*T tokens. Forward and backward are spelled out op by op, as a
CUDA training engine runs them, with every activation in a buffer allocated once per
batch shape.
"""
import math
from dataclasses import dataclass

import numpy as np

from microgpt.backend import get_backend


# ----------------------------------------------------------------------------------
# the parameter table: allocation, init, checkpoint, optimizer and count_params read it

@dataclass(frozen=True)
class ParamSpec:
    name: str
    shape: tuple
    group: str          # embedding | attention | mlp | norm, for count_params

    @property
    def size(self):
        return math.prod(self.shape)

    @property
    def decay(self):
        """Weight decay applies to matrices only, not to LayerNorm weights and biases."""
        return len(self.shape) == 2


def param_specs(cfg):
    C = cfg.d_model
    specs = [ParamSpec("wte", (cfg.vocab_size, C), "embedding"),
             ParamSpec("wpe", (cfg.context, C), "embedding")]
    for i in range(cfg.n_layer):
        h = f"h.{i}."
        specs += [ParamSpec(h + "ln_1.weight", (C,), "norm"),
                  ParamSpec(h + "ln_1.bias", (C,), "norm"),
                  ParamSpec(h + "attn.w_qkv", (C, 3 * C), "attention"),
                  ParamSpec(h + "attn.w_o", (C, C), "attention"),
                  ParamSpec(h + "ln_2.weight", (C,), "norm"),
                  ParamSpec(h + "ln_2.bias", (C,), "norm"),
                  ParamSpec(h + "mlp.w_fc", (C, 4 * C), "mlp"),
                  ParamSpec(h + "mlp.w_proj", (4 * C, C), "mlp")]
    specs += [ParamSpec("ln_f.weight", (C,), "norm"), ParamSpec("ln_f.bias", (C,), "norm")]
    return specs


class ParamLayout:
    """Where each parameter lives in one flat buffer.

    Matrices come first, so the decayed parameters are the prefix [0, n_decay) and one
    AdamW launch (one all-reduce, one norm) covers everything."""

    def __init__(self, cfg):
        self.specs = param_specs(cfg)
        ordered = [s for s in self.specs if s.decay] + [s for s in self.specs if not s.decay]
        self.offsets, offset = {}, 0
        for s in ordered:
            self.offsets[s.name] = offset
            offset += s.size
        self.size = offset
        self.n_decay = sum(s.size for s in self.specs if s.decay)

    def views(self, flat):
        """name -> a view of flat with the parameter's shape (any backend's array)."""
        return {s.name: flat[self.offsets[s.name]:self.offsets[s.name] + s.size].reshape(s.shape)
                for s in self.specs}


def init_params(cfg, layout, seed):
    """GPT-2 init as a flat float32 host array: N(0, 0.02), the residual projections
    w_o and w_proj scaled by 1/sqrt(2 n_layer), LayerNorm weight 1 and bias 0."""
    rng = np.random.default_rng(seed)
    flat = np.empty(layout.size, np.float32)
    views = layout.views(flat)
    for s in layout.specs:
        if s.group == "norm":
            views[s.name][...] = 1.0 if s.name.endswith("weight") else 0.0
        else:
            std = 0.02
            if s.name.endswith(("attn.w_o", "mlp.w_proj")):
                std /= math.sqrt(2 * cfg.n_layer)
            views[s.name][...] = rng.normal(0.0, std, s.shape)
    return flat


# ----------------------------------------------------------------------------------
# activations: allocated once per (B, T)

class Activations:
    """Every buffer a forward + backward pass of shape (B, T) writes. Shapes in comments."""

    def __init__(self, backend, cfg, B, T):
        C, H, D, V, L = cfg.d_model, cfg.n_head, cfg.head_dim, cfg.vocab_size, cfg.n_layer
        z = backend.zeros
        self.B, self.T = B, T
        # the input of each block, and the last block's output
        self.resid = [z((B, T, C)) for _ in range(L + 1)]
        self.ln_1 = [z((B, T, C)) for _ in range(L)]
        self.ln_1_stats = [(z((B * T,)), z((B * T,))) for _ in range(L)]  # (mean, rstd)
        self.q = [z((B, H, T, D)) for _ in range(L)]
        self.k = [z((B, H, T, D)) for _ in range(L)]
        self.v = [z((B, H, T, D)) for _ in range(L)]
        self.att = [z((B, H, T, D)) for _ in range(L)]
        self.att_lse = [z((B, H, T)) for _ in range(L)]
        self.att_merged = [z((B, T, C)) for _ in range(L)]
        self.mid = [z((B, T, C)) for _ in range(L)]          # resid + attention
        self.ln_2 = [z((B, T, C)) for _ in range(L)]
        self.ln_2_stats = [(z((B * T,)), z((B * T,))) for _ in range(L)]
        self.fc = [z((B, T, 4 * C)) for _ in range(L)]
        self.fc_gelu = [z((B, T, 4 * C)) for _ in range(L)]
        self.ln_f = z((B, T, C))
        self.ln_f_stats = (z((B * T,)), z((B * T,)))
        self.logits = z((B, T, V))                           # becomes dlogits in the backward
        self.losses = z((B * T,))
        self.logits_lse = z((B * T,))
        # scratch, reused by every layer
        self.qkv = z((B, T, 3 * C))
        self.proj = z((B, T, C))
        self.dresid = z((B, T, C))
        self.dln = z((B, T, C))
        self.dfc = z((B, T, 4 * C))
        self.dq, self.dk, self.dv, self.datt = (z((B, H, T, D)) for _ in range(4))


def rows(x):
    """(B, T, X) -> (B*T, X), a view: matmuls and LayerNorm see token rows."""
    return x.reshape(x.shape[0] * x.shape[1], x.shape[2])


# ----------------------------------------------------------------------------------
# the model

class GPT:
    def __init__(self, config, backend="numpy", seed=0, dtype=np.float32):
        self.config = config
        self.backend = get_backend(backend, dtype) if isinstance(backend, str) else backend
        self.layout = ParamLayout(config)
        ops = self.backend
        self.params_flat = ops.to_device(init_params(config, self.layout, seed))
        self.grads_flat = ops.zeros((self.layout.size,))
        self.params = self.layout.views(self.params_flat)
        self.grads = self.layout.views(self.grads_flat)
        self._acts = None

    def _activations(self, B, T):
        if T > self.config.context:
            raise ValueError(f"sequence length {T} exceeds the model's context "
                             f"{self.config.context}")
        if self._acts is None or (self._acts.B, self._acts.T) != (B, T):
            self._acts = None   # free the old buffers before allocating the new ones
            self._acts = Activations(self.backend, self.config, B, T)
        return self._acts

    # forward ----------------------------------------------------------------------
    def _forward(self, idx):
        """idx (B, T) backend int32 -> the activations, logits filled in."""
        ops, p, cfg = self.backend, self.params, self.config
        B, T = idx.shape
        a = self._activations(B, T)
        ops.encoder_forward(a.resid[0], idx, p["wte"], p["wpe"])
        for i in range(cfg.n_layer):
            h = f"h.{i}."
            ops.layernorm_forward(rows(a.ln_1[i]), *a.ln_1_stats[i], rows(a.resid[i]),
                                  p[h + "ln_1.weight"], p[h + "ln_1.bias"])
            ops.matmul(rows(a.qkv), rows(a.ln_1[i]), p[h + "attn.w_qkv"])         # fused QKV
            ops.split_heads_forward(a.q[i], a.k[i], a.v[i], a.qkv)               # (B, H, T, D)
            ops.attention_forward(a.att[i], a.att_lse[i], a.q[i], a.k[i], a.v[i])
            ops.merge_heads_forward(a.att_merged[i], a.att[i])                    # (B, T, C)
            ops.matmul(rows(a.proj), rows(a.att_merged[i]), p[h + "attn.w_o"])
            ops.residual_forward(a.mid[i], a.resid[i], a.proj)
            ops.layernorm_forward(rows(a.ln_2[i]), *a.ln_2_stats[i], rows(a.mid[i]),
                                  p[h + "ln_2.weight"], p[h + "ln_2.bias"])
            ops.matmul(rows(a.fc[i]), rows(a.ln_2[i]), p[h + "mlp.w_fc"])
            ops.gelu_forward(a.fc_gelu[i], a.fc[i])
            ops.matmul(rows(a.proj), rows(a.fc_gelu[i]), p[h + "mlp.w_proj"])
            ops.residual_forward(a.resid[i + 1], a.mid[i], a.proj)
        ops.layernorm_forward(rows(a.ln_f), *a.ln_f_stats, rows(a.resid[-1]),
                              p["ln_f.weight"], p["ln_f.bias"])
        ops.matmul(rows(a.logits), rows(a.ln_f), p["wte"], transpose_b=True)     # tied head
        return a

    def forward(self, idx):
        """idx int (B, T) -> logits (B, T, V), a host numpy array."""
        idx = self._to_tokens(idx)
        return self.backend.to_host(self._forward(idx).logits)

    # forward + backward -----------------------------------------------------------
    def forward_backward(self, idx, targets):
        """The training pass: gradients land in self.grads (zeroed first); returns the
        mean loss as a float."""
        ops, p, g, cfg = self.backend, self.params, self.grads, self.config
        idx, targets = self._to_tokens(idx), self._to_tokens(targets)
        a = self._forward(idx)
        B, T = idx.shape
        ops.crossentropy_forward(a.losses, a.logits_lse, rows(a.logits), targets.reshape(B * T))

        ops.fill_zero(self.grads_flat)
        dlogits = rows(a.logits)                                                 # in place
        ops.crossentropy_backward(dlogits, dlogits, a.logits_lse, targets.reshape(B * T),
                                  1.0 / (B * T))
        ops.matmul(rows(a.dln), dlogits, p["wte"])
        ops.matmul(g["wte"], dlogits, rows(a.ln_f), transpose_a=True, accumulate=True)
        ops.fill_zero(a.dresid)
        ops.layernorm_backward(rows(a.dresid), g["ln_f.weight"], g["ln_f.bias"], rows(a.dln),
                               rows(a.resid[-1]), p["ln_f.weight"], *a.ln_f_stats)
        for i in reversed(range(cfg.n_layer)):
            h = f"h.{i}."
            # MLP: dresid is the gradient of the block's output and of its MLP branch
            ops.matmul(rows(a.dfc), rows(a.dresid), p[h + "mlp.w_proj"], transpose_b=True)
            ops.matmul(g[h + "mlp.w_proj"], rows(a.fc_gelu[i]), rows(a.dresid),
                       transpose_a=True, accumulate=True)
            ops.gelu_backward(a.dfc, a.dfc, a.fc[i])
            ops.matmul(rows(a.dln), rows(a.dfc), p[h + "mlp.w_fc"], transpose_b=True)
            ops.matmul(g[h + "mlp.w_fc"], rows(a.ln_2[i]), rows(a.dfc),
                       transpose_a=True, accumulate=True)
            ops.layernorm_backward(rows(a.dresid), g[h + "ln_2.weight"], g[h + "ln_2.bias"],
                                   rows(a.dln), rows(a.mid[i]), p[h + "ln_2.weight"],
                                   *a.ln_2_stats[i])
            # attention: dresid is now the gradient of mid
            ops.matmul(rows(a.proj), rows(a.dresid), p[h + "attn.w_o"], transpose_b=True)
            ops.matmul(g[h + "attn.w_o"], rows(a.att_merged[i]), rows(a.dresid),
                       transpose_a=True, accumulate=True)
            ops.merge_heads_backward(a.datt, a.proj)
            ops.attention_backward(a.dq, a.dk, a.dv, a.datt, a.q[i], a.k[i], a.v[i],
                                   a.att[i], a.att_lse[i])
            ops.split_heads_backward(a.qkv, a.dq, a.dk, a.dv)
            ops.matmul(rows(a.dln), rows(a.qkv), p[h + "attn.w_qkv"], transpose_b=True)
            ops.matmul(g[h + "attn.w_qkv"], rows(a.ln_1[i]), rows(a.qkv),
                       transpose_a=True, accumulate=True)
            ops.layernorm_backward(rows(a.dresid), g[h + "ln_1.weight"], g[h + "ln_1.bias"],
                                   rows(a.dln), rows(a.resid[i]), p[h + "ln_1.weight"],
                                   *a.ln_1_stats[i])
        ops.encoder_backward(g["wte"], g["wpe"], a.dresid, idx)
        return ops.mean(a.losses)   # read back last, so the host never waits mid-step

    def loss_and_grads(self, idx, targets):
        """-> (mean loss, {name: gradient as a host numpy array})."""
        loss = self.forward_backward(idx, targets)
        host = self.backend.to_host(self.grads_flat)
        return loss, self.layout.views(host)

    def evaluate(self, idx, targets):
        """Mean loss without a backward pass."""
        idx, targets = self._to_tokens(idx), self._to_tokens(targets)
        a = self._forward(idx)
        B, T = idx.shape
        self.backend.crossentropy_forward(a.losses, a.logits_lse, rows(a.logits),
                                          targets.reshape(B * T))
        return self.backend.mean(a.losses)

    # state ------------------------------------------------------------------------
    def state_dict(self):
        """{name: host numpy float32 array}, the checkpoint's tensors."""
        host = self.backend.to_host(self.params_flat).astype(np.float32)
        return {name: v.copy() for name, v in self.layout.views(host).items()}

    def load_state_dict(self, state):
        expected = {s.name: s.shape for s in self.layout.specs}
        missing, unexpected = expected.keys() - state.keys(), state.keys() - expected.keys()
        if missing or unexpected:
            raise ValueError(f"state dict does not match the model: missing {sorted(missing)}, "
                             f"unexpected {sorted(unexpected)}")
        host = np.empty(self.layout.size, np.float32)
        views = self.layout.views(host)
        for name, shape in expected.items():
            if tuple(state[name].shape) != shape:
                raise ValueError(f"parameter {name} has shape {tuple(state[name].shape)}, "
                                 f"the model expects {shape}")
            views[name][...] = state[name]
        self.backend.copy(self.params_flat, self.backend.to_device(host))

    def _to_tokens(self, idx):
        """Host ints become backend int32 (B, T); backend arrays pass through."""
        if isinstance(idx, np.ndarray):
            if idx.ndim != 2:
                raise ValueError(f"token indices must be (B, T), got shape {idx.shape}")
            if idx.size and (idx.min() < 0 or idx.max() >= self.config.vocab_size):
                raise ValueError(f"token indices must lie in [0, {self.config.vocab_size})")
            return self.backend.to_device(np.ascontiguousarray(idx, dtype=np.int32))
        return idx
