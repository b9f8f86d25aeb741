#!/usr/bin/env python3
"""The device memory of a training step, buffer by buffer, computed on the CPU.

    python tools/memory_account.py --config andrea-120m --batch-size 16 --seq-len 1024
    python tools/memory_account.py --config andrea-12m --batch-size 64 --seq-len 256
    python tools/memory_account.py --config andrea-120m --n-layer 48 --d-model 1600 \
        --n-head 25 --batch-size 8 --seq-len 1024        # the bench's gpt2-xl geometry
    python tools/memory_account.py --config andrea-120m --recompute   # GPT's recompute, all
    python tools/memory_account.py --config andrea-120m --recompute gelu   # GELU's alone
    python tools/memory_account.py --config andrea-120m --modes   # each mode's total
    python tools/memory_account.py --config andrea-12m --batch-size 64 --seq-len 256 \
        --deterministic                   # the batch with its token_runs (--deterministic)

From the tables the backends allocate from (microgpt.params.ParamLayout for the
parameters, their gradients and AdamW's moments; microgpt.step.step_specs for a step's
buffers, the arena's parts at their offsets), so the figures are what a Step holds: their
sum is microgpt.memory.required_bytes, the trainer's check. Not in it: the launchers'
workspaces (kept with the arrays they serve: the LayerNorm backward's partials, split-K's
turn counters, the sums' block totals, a few MB) and the CUDA graph's own memory, which
the bench's measured figure (tools/bench.py --only steps: the device's free memory before
and after) holds besides.
"""
import argparse

from microgpt.activations import RECOMPUTE_MODES, arena_layout
from microgpt.config import ConfigError, get_config
from microgpt.memory import required_bytes
from microgpt.params import ParamLayout
from microgpt.step import step_specs

MIB = 2 ** 20


def account(cfg, B, T, precision, recompute="off", deterministic=False):
    """-> [(item, shape, dtype, copies, bytes of one)]: the model's and the optimizer's arrays,
    then the step's buffers in the table's order (an arena's part with copies 0: its
    bytes are the arena's), the arena last."""
    layout = ParamLayout(cfg)
    rows = [("parameters (float32 masters)", (layout.size,), "float32", 1, 4 * layout.size),
            ("gradients", (layout.size,), "float32", 1, 4 * layout.size),
            ("AdamW m and v", (layout.size,), "float32", 2, 4 * layout.size)]
    if precision == "bf16":
        rows.append(("matrices' bf16 copy", (layout.n_decay,), "bf16", 1, 2 * layout.n_decay))
    specs = step_specs(cfg, B, T, precision, recompute=recompute, token_runs=deterministic)
    offsets, _ = arena_layout(specs)
    for s in specs:
        dtype = {"uint16": "bf16", None: "float32"}.get(s.dtype, s.dtype)
        if s.phase is not None:
            rows.append((f"{s.name} (arena, {'/'.join(s.phase)}, at "
                         f"{4 * offsets[s.name] / MIB:,.1f} MiB)", s.shape, dtype, 0,
                         s.bytes_each))
        elif s.allocations:
            rows.append((s.name, s.shape, dtype, s.allocations, s.bytes_each))
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="andrea-120m")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--seq-len", type=int, default=None, help="default: the context")
    parser.add_argument("--precision", choices=["fp32", "bf16"], default="bf16")
    parser.add_argument("--vocab-size", type=int, default=None,
                        help="for a config whose vocabulary is the tokenizer's (microgpt)")
    parser.add_argument("--recompute", nargs="?", choices=RECOMPUTE_MODES + ("on",),
                        const="all", default="off",
                        help="what the backward writes again, not kept per layer (the "
                        "trainer's --recompute): off, nothing; gelu, GELU's output; all "
                        "(or on; the default without a mode), the LayerNorms' outputs too")
    parser.add_argument("--modes", action="store_true",
                        help="each recompute mode's total, in place of the table")
    parser.add_argument("--deterministic", action="store_true",
                        help="a deterministic backend's step, whose batch carries the ids' "
                        "sort too (the trainer's --deterministic)")
    for field in ("n_layer", "d_model", "n_head"):
        parser.add_argument("--" + field.replace("_", "-"), type=int, default=None,
                            help="the config's, overridden (the bench's GPT-2 geometries)")
    args = parser.parse_args(argv)
    overrides = {field: getattr(args, field) for field in ("vocab_size", "n_layer",
                                                           "d_model", "n_head")
                 if getattr(args, field) is not None}
    try:
        base = get_config(args.config, **overrides)
    except ConfigError as err:
        parser.error(f"{err}{' (here: --vocab-size N)' if 'vocab_size' in str(err) else ''}")
    T = args.seq_len or base.context
    cfg = get_config(args.config, context=max(T, base.context), **overrides)
    mode = "all" if args.recompute == "on" else args.recompute

    def total_of(mode):
        rows = account(cfg, args.batch_size, T, args.precision, mode, args.deterministic)
        total = sum(copies * nbytes for *_, copies, nbytes in rows)
        assert total == required_bytes(get_config(args.config, context=T, **overrides),
                                       args.batch_size, args.precision, 0, recompute=mode,
                                       deterministic=args.deterministic)
        return rows, total
    title = (f"{args.config}, B {args.batch_size} x T {T}, {args.precision}"
             f"{'' if args.modes or mode == 'off' else ', recompute ' + mode}"
             f"{', deterministic' if args.deterministic else ''}\n")
    print(title)
    if args.modes:
        print("| recompute | GiB |\n|---|--:|")
        for m in RECOMPUTE_MODES:
            print(f"| {m} | {total_of(m)[1] / 2 ** 30:.3f} |")
        return
    rows, total = total_of(mode)
    print("| buffer | shape | dtype | copies | MiB |\n|---|---|---|--:|--:|")
    for item, shape, dtype, copies, nbytes in rows:
        mib = copies * nbytes / MIB if copies else nbytes / MIB
        print(f"| {item} | {' x '.join(map(str, shape))} | {dtype} | {copies or '-'} | "
              f"{mib:,.1f} |")
    print(f"| **total** | | | | **{total / MIB:,.1f} ({total / 2 ** 30:.3f} GiB)** |")


if __name__ == "__main__":
    main()
