"""The parameter table: allocation, init, checkpoints, the optimizer and count_params read it.

Every parameter lives in one flat buffer (ParamLayout), so that one AdamW launch and one
norm cover them all and the data-parallel all-reduce takes it in a few large ranges; the
model sees views of it by name.
"""
import math
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np


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


# each linear layer's weight -> its bias (a config with bias)
BIASES = {"attn.w_qkv": "attn.b_qkv", "attn.w_o": "attn.b_o", "mlp.w_fc": "mlp.b_fc",
          "mlp.w_proj": "mlp.b_proj"}


def param_specs(cfg):
    C = cfg.d_model
    specs = [ParamSpec("wte", (cfg.vocab_size, C), "embedding"),
             ParamSpec("wpe", (cfg.context, C), "embedding")]

    def linear(h, weight, shape, group):
        """A block's weight and, with cfg.bias, its bias (the weight's output width)."""
        made = [ParamSpec(h + weight, shape, group)]
        return made + [ParamSpec(h + BIASES[weight], shape[1:], group)] if cfg.bias else made
    for i in range(cfg.n_layer):
        h = f"h.{i}."
        specs += [ParamSpec(h + "ln_1.weight", (C,), "norm"),
                  ParamSpec(h + "ln_1.bias", (C,), "norm"),
                  *linear(h, "attn.w_qkv", (C, 3 * C), "attention"),
                  *linear(h, "attn.w_o", (C, C), "attention"),
                  ParamSpec(h + "ln_2.weight", (C,), "norm"),
                  ParamSpec(h + "ln_2.bias", (C,), "norm"),
                  *linear(h, "mlp.w_fc", (C, 4 * C), "mlp"),
                  *linear(h, "mlp.w_proj", (4 * C, C), "mlp")]
    specs += [ParamSpec("ln_f.weight", (C,), "norm"), ParamSpec("ln_f.bias", (C,), "norm")]
    return specs


class ParamLayout:
    """Where each parameter lives in one flat buffer.

    Matrices come first, so the decayed parameters are the prefix [0, n_decay) and one
    AdamW launch (one norm) covers everything. The matrices keep the table's order (wte,
    wpe, then each block's four), so one block's matrices are one range, and so are all
    the norms: the ranges the backward hands to the data-parallel all-reduce as they
    become final (block_matrices, rows of wte and wpe, norms)."""

    def __init__(self, cfg):
        self.specs = param_specs(cfg)
        ordered = [s for s in self.specs if s.decay] + [s for s in self.specs if not s.decay]
        self.offsets, offset = {}, 0
        for s in ordered:
            self.offsets[s.name] = offset
            offset += s.size
        self.size = offset
        self.n_decay = sum(s.size for s in self.specs if s.decay)

    def block_matrices(self, i):
        """(lo, hi): the range of block i's four matrices."""
        return self._span([s.name for s in self.specs
                           if s.decay and s.name.startswith(f"h.{i}.")])

    def rows(self, name, first=0, last=None):
        """(lo, hi): the range of rows [first, last) of the named parameter (all of them by
        default): a matrix's rows are contiguous in the flat buffer."""
        spec = next(s for s in self.specs if s.name == name)
        row = spec.size // spec.shape[0]
        last = spec.shape[0] if last is None else last
        if not 0 <= first <= last <= spec.shape[0]:
            raise ValueError(f"rows [{first}, {last}) of {name}, which has {spec.shape[0]}")
        return self.offsets[name] + first * row, self.offsets[name] + last * row

    @property
    def norms(self):
        """(lo, hi): the range of every vector (the LayerNorms' weights and biases, and the
        linear layers' biases of a config with bias), the suffix."""
        return self.n_decay, self.size

    def _span(self, names):
        """(lo, hi) of the named parameters, which the layout keeps adjacent."""
        lo = min(self.offsets[n] for n in names)
        hi = max(self.offsets[s.name] + s.size for s in self.specs if s.name in names)
        assert hi - lo == sum(s.size for s in self.specs if s.name in names), names
        return lo, hi

    def views(self, flat, matrices_only=False):
        """name -> a view of flat with the parameter's shape (any backend's array);
        matrices_only: of the matrices alone, flat being the prefix [0, n_decay)."""
        return {s.name: flat[self.offsets[s.name]:self.offsets[s.name] + s.size].reshape(s.shape)
                for s in self.specs if s.decay or not matrices_only}


# elements per random stream: chunk i of the matrices is drawn from its own generator,
# seeded by (seed, i), so the values are the same whatever the number of threads drawing
INIT_CHUNK = 1 << 22


def init_params(cfg, layout, seed, threads=None, chunk=INIT_CHUNK):
    """GPT-2 init as a flat float32 host array: N(0, 0.02), the residual projections
    w_o and w_proj scaled by 1/sqrt(2 n_layer), LayerNorm weight 1, every bias 0, and the
    rows of wte past the tokens in use (a padded vocabulary) 0.

    The matrices, the prefix [0, n_decay), are drawn chunk by chunk in float32 by threads
    (NumPy's generators release the GIL): GPT-2-XL's 1.56 billion values took ~110 s as one
    float64 stream. threads (default: every CPU) changes how fast, never which values."""
    flat = np.empty(layout.size, np.float32)
    views = layout.views(flat)
    scaled = []         # (lo, hi, std) of each matrix in the flat layout
    for s in layout.specs:
        if not s.decay:
            views[s.name][...] = 1.0 if s.group == "norm" and s.name.endswith("weight") else 0.0
        else:
            std = 0.02
            if s.name.endswith(("attn.w_o", "mlp.w_proj")):
                std /= math.sqrt(2 * cfg.n_layer)
            lo = layout.offsets[s.name]
            scaled.append((lo, lo + s.size, np.float32(std)))

    def draw(i):
        lo, hi = i * chunk, min((i + 1) * chunk, layout.n_decay)
        rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(i,)))
        rng.standard_normal(hi - lo, np.float32, out=flat[lo:hi])
        for start, end, std in scaled:
            if start < hi and end > lo:
                part = flat[max(start, lo):min(end, hi)]
                np.multiply(part, std, out=part)

    chunks = range(-(-layout.n_decay // chunk))
    with ThreadPoolExecutor(threads or os.cpu_count() or 1) as pool:
        list(pool.map(draw, chunks))
    views["wte"][cfg.tokens:] = 0.0
    return flat
