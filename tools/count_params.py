#!/usr/bin/env python3
"""Where a config's parameters are: embeddings, attention projections, MLP, norms.

    python tools/count_params.py --config andrea-120m
    python tools/count_params.py --config microgpt --vocab-size 4096

Counted from microgpt.params.ParamLayout, the table the model allocates its parameters
from, so the figures are what the model really holds (the LM head is tied to wte); the
FLOPs per token are microgpt.metrics.flops_per_token's, from the same table.
"""
import argparse
import sys
from dataclasses import dataclass

from microgpt.config import CONFIGS, ConfigError, get_config
from microgpt.metrics import flops_per_token
from microgpt.params import ParamLayout

BYTE_VOCAB = 256    # the byte tokenizer's vocabulary: microgpt's size when none is given
TABLE_ORDER = ("embedding", "attention", "mlp", "norm")   # a group not named here goes last


@dataclass(frozen=True)
class ComponentCount:
    group: str              # a ParamSpec group: embedding | attention | mlp | norm
    tensors: tuple          # short names of its tensors, e.g. ("w_qkv", "w_o")
    per_layer: int          # in one block (every block holds the same tensors)
    all_layers: int         # in all n_layer blocks
    outside_layers: int     # wte, wpe, ln_f

    @property
    def total(self):
        return self.all_layers + self.outside_layers


def short_name(name):
    """'h.3.attn.w_qkv' -> 'w_qkv', 'h.0.ln_1.weight' -> 'ln_1', 'wte' -> 'wte'."""
    parts = name.split(".")
    if parts[-1] in ("weight", "bias"):
        parts.pop()
    return parts[-1]


def in_a_layer(spec):
    return spec.name.startswith("h.")


def table_position(group):
    return TABLE_ORDER.index(group) if group in TABLE_ORDER else len(TABLE_ORDER)


def count_params(cfg):
    """-> ([ComponentCount] in TABLE_ORDER, total parameters)."""
    layout = ParamLayout(cfg)
    by_group = {}
    for spec in layout.specs:
        by_group.setdefault(spec.group, []).append(spec)
    counts = [ComponentCount(
        group,
        tensors=tuple(dict.fromkeys(short_name(s.name) for s in specs)),
        per_layer=sum(s.size for s in specs if s.name.startswith("h.0.")),
        all_layers=sum(s.size for s in specs if in_a_layer(s)),
        outside_layers=sum(s.size for s in specs if not in_a_layer(s)))
        for group, specs in sorted(by_group.items(), key=lambda item: table_position(item[0]))]
    assert sum(c.total for c in counts) == layout.size
    return counts, layout.size


def format_table(name, cfg, counts, total):
    """The report count_params.py prints, as one string."""
    header = ("component", "tensors", "per layer", "all layers", "outside layers",
              "total", "share")
    rows = [(c.group, ", ".join(c.tensors), f"{c.per_layer:,}", f"{c.all_layers:,}",
             f"{c.outside_layers:,}", f"{c.total:,}", f"{c.total / total:.2%}") for c in counts]
    rows.append(("total", "", f"{sum(c.per_layer for c in counts):,}",
                 f"{sum(c.all_layers for c in counts):,}",
                 f"{sum(c.outside_layers for c in counts):,}", f"{total:,}", "100.00%"))
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]

    def line(row):
        return "  ".join(cell.ljust(w) if i < 2 else cell.rjust(w)
                         for i, (cell, w) in enumerate(zip(row, widths))).rstrip()

    attention = next(c for c in counts if c.group == "attention")
    return "\n".join([
        f"{name}: n_layer {cfg.n_layer}, d_model {cfg.d_model}, n_head {cfg.n_head}, head_dim "
        f"{cfg.head_dim}, context {cfg.context}, vocab_size {cfg.vocab_size}; LM head tied to wte",
        "", line(header), *map(line, rows), "",
        f"attention projections: {attention.per_layer:,} per layer, {attention.all_layers:,} "
        f"over all layers, {attention.total / total:.1%} of all {total:,} parameters",
        f"training FLOPs per token (forward + backward, the count MFU uses): "
        f"{flops_per_token(cfg):,}",
    ])


class OneLineErrors(argparse.ArgumentParser):
    def error(self, message):
        self.exit(2, f"count_params.py: error: {message}\n")


def main(argv=None):
    parser = OneLineErrors(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="andrea-120m", choices=list(CONFIGS),
                        help="the config to count (default: andrea-120m)")
    parser.add_argument("--vocab-size", type=int,
                        help=f"override the vocabulary (microgpt's comes from the tokenizer: "
                             f"{BYTE_VOCAB}, the byte tokenizer's, when not given)")
    args = parser.parse_args(argv)
    vocab_size = args.vocab_size
    if vocab_size is None and CONFIGS[args.config]["vocab_size"] is None:
        vocab_size = BYTE_VOCAB
        print(f"note: {args.config} takes its vocabulary from the tokenizer; counting with "
              f"the byte tokenizer's {BYTE_VOCAB} (pass --vocab-size N for another)\n")
    try:
        cfg = get_config(args.config, vocab_size=vocab_size)
    except ConfigError as err:
        parser.error(str(err))
    counts, total = count_params(cfg)
    print(format_table(args.config, cfg, counts, total))
    return 0


if __name__ == "__main__":
    sys.exit(main())
