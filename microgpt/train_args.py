"""The trainer's command line: its flags, their defaults, and what --resume keeps.

TrainArgs is everything a run was started with; the checkpoint's state.json keeps it, so
that --resume rebuilds the run, and PINNED names the fields a resumed run may not change.
A flag is declared once in parse_args and once as a TrainArgs field (same name, with
dashes); a flag not given parses to None, which resolve_args fills in from DEFAULTS (a new
run) or from the checkpoint (a resumed one).
"""
import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path

from microgpt.cli import ArgumentParser, DEVICES, non_negative, positive_float, positive_int
from microgpt.config import CONFIGS
from microgpt.data import default_cache_dir
from microgpt.errors import UserError
from microgpt.model import PRECISIONS

PROG = "microgpt.train"

# The run with no arguments. docs/training.md has the measurements behind it: in five
# minutes on two cores, one layer taking many steps ends lower than deeper, slower models.
CPU_DEFAULT_MODEL = dict(n_layer=1, d_model=128, n_head=4, context=128)
DEFAULT_BPE_VOCAB = 1024
DEFAULTS = dict(steps=1200, batch_size=16, lr=3e-3, eval_every=200, eval_batches=16,
                sample_every=400, checkpoint_every=400, log_every=20, seed=0)


@dataclass(frozen=True)
class TrainArgs:
    """Everything a run was started with; state.json keeps it, so --resume rebuilds the run."""
    config: str | None       # None: the CPU default, "microgpt" with CPU_DEFAULT_MODEL
    n_layer: int | None      # overrides of the config's fields
    d_model: int | None
    n_head: int | None
    context: int | None
    vocab_size: int | None
    data: str | None         # None: the standard library
    tokenizer: str | None    # "bpe", "bytes" or a tokenizer.json; None: bpe for text
    batch_size: int
    lr: float
    warmup: int
    seed: int
    steps: int
    eval_every: int
    eval_batches: int
    sample_every: int
    checkpoint_every: int
    log_every: int


# What defines the run: --resume takes these from the checkpoint and refuses other values.
PINNED = ("config", "n_layer", "d_model", "n_head", "context", "vocab_size", "data",
          "tokenizer", "batch_size", "lr", "warmup", "seed")
# What a None in the saved arguments stands for, in messages
UNSET = {"config": "the default: microgpt with " + ", ".join(
             f"{k} {v}" for k, v in CPU_DEFAULT_MODEL.items()),
         "data": "the default: the Python standard library",
         "tokenizer": "the default: bpe for text"}
NON_NEGATIVE = ("warmup", "seed", "eval_every", "eval_batches", "sample_every",
                "checkpoint_every")


def parse_args(argv):
    """-> argparse.Namespace; a flag not given is None (resolve_args fills it in)."""
    p = ArgumentParser(prog=PROG, description="Train a GPT from scratch. With no arguments: "
                       "a small model on the Python standard library's source, on the CPU, "
                       "in under four minutes.")
    g = p.add_argument_group("model")
    g.add_argument("--config", metavar="NAME", help=f"one of {', '.join(CONFIGS)} (default: "
                   "microgpt with " + ", ".join(f"{k} {v}" for k, v in CPU_DEFAULT_MODEL.items())
                   + ")")
    for field in ("n_layer", "d_model", "n_head", "context", "vocab_size"):
        g.add_argument("--" + field.replace("_", "-"), type=positive_int, metavar="N",
                       help=f"override the config's {field}")
    g = p.add_argument_group("data")
    g.add_argument("--data", metavar="PATH", help="a UTF-8 text file, a directory of text "
                   "files, or llm.c .bin token shards (default: the Python standard library)")
    g.add_argument("--tokenizer", metavar="KIND", help="bpe (train byte-level BPE at the "
                   "vocab size), bytes (vocab 256) or a tokenizer.json (default: bpe for text)")
    g.add_argument("--cache-dir", metavar="DIR", help="where tokenizers, token shards and "
                   f"compiled kernels are cached (default: $MICROGPT_CACHE_DIR or {default_cache_dir()})")
    g = p.add_argument_group("training")
    g.add_argument("--device", choices=DEVICES, default="auto",
                   help="cpu runs NumPy, cuda the GPU kernels; auto takes a GPU if there is one")
    g.add_argument("--precision", choices=PRECISIONS,
                   help="bf16: the GEMMs and attention on the tensor cores with bf16 operands, "
                   "float32 master weights, moments and statistics (cuda only); fp32: float32 "
                   "throughout (default: bf16 on a GPU with bf16 tensor cores, else fp32)")
    g.add_argument("--zero", type=int, choices=(0, 1), default=0,
                   help="under mpirun, 1 shards AdamW's moments over the ranks (ZeRO-1), "
                   "each rank keeping and updating its shard; the same steps as 0 (default: 0)")
    g.add_argument("--deterministic", action="store_true",
                   help="the same bits for the same seed on one GPU: the GEMMs take no "
                   "split-K, whose blocks add their parts by atomics (every other kernel "
                   "gives the same bits anyway; docs/convergence.md has the cost)")
    g.add_argument("--steps", type=positive_int, metavar="N",
                   help="optimizer steps in all" + by_default("steps"))
    g.add_argument("--batch-size", type=positive_int, metavar="B",
                   help="sequences per step" + by_default("batch_size"))
    g.add_argument("--lr", type=positive_float, metavar="LR",
                   help="peak learning rate" + by_default("lr"))
    g.add_argument("--warmup", type=non_negative(int), metavar="N",
                   help="linear warmup steps (default: 5%% of --steps)")
    g.add_argument("--seed", type=non_negative(int), metavar="N",
                   help="model init and batch order" + by_default("seed"))
    g = p.add_argument_group("output")
    g.add_argument("--out", metavar="DIR", help="run directory: checkpoints, loss.png, "
                   "samples.txt (default: runs/DATE-TIME; on --resume, the checkpoint's run)")
    g.add_argument("--resume", metavar="DIR", help="continue from a checkpoint, or from a run "
                   "directory's latest one; the run's settings come from the checkpoint")
    g.add_argument("--eval-every", type=non_negative(int), metavar="N", help="validation loss "
                   "every N steps, 0 for only at the end" + by_default("eval_every"))
    g.add_argument("--eval-batches", type=non_negative(int), metavar="N",
                   help="batches in the validation set, 0 for the whole split (every token "
                   "once)" + by_default("eval_batches"))
    g.add_argument("--sample-every", type=non_negative(int), metavar="N",
                   help="print a sample every N steps, 0 for never" + by_default("sample_every"))
    g.add_argument("--checkpoint-every", type=non_negative(int), metavar="N", help="checkpoint "
                   "every N steps, 0 for only at the end" + by_default("checkpoint_every"))
    g.add_argument("--log-every", type=positive_int, metavar="N",
                   help="a log line every N steps" + by_default("log_every"))
    g.add_argument("--stop-at", type=positive_int, metavar="STEP", help="checkpoint and exit "
                   "after this step, the schedule still spanning --steps (continue with --resume)")
    return p.parse_args(argv)


def by_default(key):
    return f" (default: {DEFAULTS[key]})"


def resolve_args(ns, saved):
    """argparse's namespace (None where not given) + a checkpoint's saved args -> TrainArgs.
    On --resume the PINNED fields come from the checkpoint; a different value is an error."""
    given = {f.name: getattr(ns, f.name) for f in dataclasses.fields(TrainArgs)}
    for key in ("data", "tokenizer"):   # paths are kept absolute, so --resume works from anywhere
        if given[key] is not None and given[key] not in ("bpe", "bytes"):
            given[key] = str(Path(given[key]).resolve())
    if saved is None:
        values = {k: v if v is not None else DEFAULTS.get(k) for k, v in given.items()}
        if values["warmup"] is None:
            values["warmup"] = values["steps"] // 20
        return TrainArgs(**values)
    missing = given.keys() - (saved.keys() if isinstance(saved, dict) else set())
    if missing:
        raise UserError(f"the checkpoint's state.json lacks the run's settings "
                        f"({', '.join(sorted(missing))}); it cannot be resumed, start a new run")
    check_saved_args(saved)
    for key in PINNED:
        if given[key] is not None and given[key] != saved[key]:
            flag = "--" + key.replace("_", "-")
            theirs = UNSET.get(key, "not set") if saved[key] is None else saved[key]
            raise UserError(f"{flag} {given[key]} differs from the checkpoint's {key} "
                            f"({theirs}); a resumed run keeps its settings: drop {flag}, or "
                            "start a new run")
    return TrainArgs(**{k: saved[k] if given[k] is None else given[k] for k in given})


def check_saved_args(saved):
    """The arguments in a checkpoint's state.json have the types and ranges the command line
    allows (a hand-edited file must fail here, in one line, not deep in the run)."""
    for field in dataclasses.fields(TrainArgs):
        value = saved[field.name]
        if value is None:
            ok = field.type in (int | None, str | None)
        elif field.type is float:
            ok = type(value) in (int, float) and 0 < value < math.inf
        elif field.type in (int, int | None):
            ok = type(value) is int and value >= (field.name not in NON_NEGATIVE)
        else:
            ok = isinstance(value, str)
        if not ok:
            raise UserError(f"the checkpoint's state.json is damaged (args.{field.name} is "
                            f"{value!r}); it cannot be resumed, use another checkpoint")
