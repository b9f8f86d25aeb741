"""The trainer's command line: its flags, their defaults, and what --resume keeps.

TrainArgs is everything a run was started with; the checkpoint's state.json keeps it, so
that --resume rebuilds the run, and PINNED names the fields a resumed run may not change.
A flag is declared once in build_parser and once as a TrainArgs field (same name, with
dashes); a flag not given parses to None, which resolve_args fills in from DEFAULTS (a new
run) or from the checkpoint (a resumed one). The flag's type checks a value wherever it
comes from: the command line, a --config-file, or a checkpoint's state.json.
"""
import argparse
import dataclasses
from dataclasses import dataclass
from pathlib import Path

from microgpt.activations import PRECISIONS
from microgpt.cli import (DEVICES, ArgumentParser, non_negative, number_in, positive_float,
                          positive_int)
from microgpt.config import CONFIGS, DEFAULT_CONFIG
from microgpt.data import default_cache_dir
from microgpt.errors import UserError
from microgpt.memory import RECOMPUTE_CHOICES
from microgpt.optim import AdamWConfig

PROG = "microgpt.train"
DEFAULT_BPE_VOCAB = 1024
_ADAMW = AdamWConfig()
DEFAULTS = dict(config=DEFAULT_CONFIG, steps=1200, batch_size=16, grad_accum=1, lr=3e-3,
                eval_every=200, eval_batches=16, sample_every=400, checkpoint_every=400,
                log_every=20, seed=0,
                weight_decay=_ADAMW.weight_decay, beta1=_ADAMW.beta1, beta2=_ADAMW.beta2,
                eps=_ADAMW.eps, grad_clip=_ADAMW.max_norm, min_lr_ratio=_ADAMW.min_lr_ratio)


@dataclass(frozen=True)
class TrainArgs:
    """Everything a run was started with; state.json keeps it, so --resume rebuilds the run."""
    config: str | None       # None: --init-from's model, or (an older run) DEFAULT_CONFIG
    n_layer: int | None      # overrides of the config's fields
    d_model: int | None
    n_head: int | None
    context: int | None
    vocab_size: int | None
    init_from: str | None    # a Hugging Face GPT-2 directory, the initial model
    data: str | None         # None: the standard library
    tokenizer: str | None    # "bpe", "bytes" or a tokenizer.json; None: bpe for text
    batch_size: int          # sequences of a micro-batch, over all ranks
    grad_accum: int          # micro-batches an optimizer step accumulates
    lr: float
    warmup: int
    min_lr_ratio: float
    weight_decay: float
    beta1: float
    beta2: float
    eps: float
    grad_clip: float         # 0: none
    seed: int
    steps: int
    eval_every: int
    eval_batches: int
    sample_every: int
    checkpoint_every: int
    log_every: int


# What defines the run: --resume takes these from the checkpoint and refuses other values.
PINNED = ("config", "n_layer", "d_model", "n_head", "context", "vocab_size", "init_from",
          "data", "tokenizer", "batch_size", "grad_accum", "lr", "warmup", "min_lr_ratio",
          "weight_decay", "beta1", "beta2", "eps", "grad_clip", "seed")
# Fields added after checkpoints were first written: an older state.json lacks them, and
# its run had the value given here
ADDED = dict(init_from=None, grad_accum=1, min_lr_ratio=_ADAMW.min_lr_ratio,
             weight_decay=_ADAMW.weight_decay, beta1=_ADAMW.beta1, beta2=_ADAMW.beta2,
             eps=_ADAMW.eps, grad_clip=_ADAMW.max_norm)
# What a None in the saved arguments stands for, in messages
UNSET = {"config": f"the default: {DEFAULT_CONFIG}",
         "data": "the default: the Python standard library",
         "tokenizer": "the default: bpe for text"}
unit_interval = number_in(float, 0, 1, what="a number in [0, 1)")


def build_parser():
    p = ArgumentParser(prog=PROG, description="Train a GPT from scratch, or fine-tune GPT-2 "
                       "(--init-from). With no arguments: a small model on the Python "
                       "standard library's source, on the CPU, in under four minutes.")
    p.add_argument("--config-file", metavar="FILE.toml", help="options from a TOML file, "
                   "one key per flag (batch_size = 16 or batch-size = 16); the command "
                   "line's flags win over it")
    g = p.add_argument_group("model")
    g.add_argument("--config", metavar="NAME", help=f"one of {', '.join(CONFIGS)}"
                   + by_default("config"))
    for field in ("n_layer", "d_model", "n_head", "context", "vocab_size"):
        g.add_argument("--" + field.replace("_", "-"), type=positive_int, metavar="N",
                       help=f"override the config's {field}")
    g.add_argument("--init-from", metavar="DIR", help="start from a Hugging Face GPT-2 "
                   "directory (config.json and model.safetensors as GPT2LMHeadModel saves "
                   "them; its tokenizer files beside): its model and tokenizer")
    g = p.add_argument_group("data")
    g.add_argument("--data", metavar="PATH", help="a UTF-8 text file, a directory of text "
                   "files, or llm.c .bin token shards (default: the Python standard library)")
    g.add_argument("--tokenizer", metavar="KIND", help="bpe (train byte-level BPE at the "
                   "vocab size), bytes (vocab 256) or a tokenizer.json (default: bpe for text)")
    g.add_argument("--cache-dir", metavar="DIR", help="where tokenizers, token shards and "
                   "compiled kernels are cached (default: $MICROGPT_CACHE_DIR or "
                   f"{default_cache_dir()})")
    g = p.add_argument_group("training")
    g.add_argument("--device", choices=DEVICES, default="auto",
                   help="cpu runs NumPy, cuda the GPU kernels; auto takes a GPU if there is one")
    g.add_argument("--precision", choices=PRECISIONS,
                   help="bf16: the GEMMs and attention on the tensor cores with bf16 operands, "
                   "float32 master weights, moments and statistics (cuda only); fp32: float32 "
                   "throughout (default: bf16 on a GPU with bf16 tensor cores, else fp32)")
    g.add_argument("--recompute", choices=RECOMPUTE_CHOICES, default="auto",
                   help="what the backward writes again rather than keeping per layer: "
                   "off, nothing; gelu, GELU's output (8 x d_model bytes a token a layer "
                   "less in bf16, ~0.8%% more step time); all (or on), the LayerNorms' "
                   "outputs too (12 x d_model bytes, ~1.5%%); auto: the first of off, gelu, "
                   "all that the run fits in memory with (default: auto)")
    g.add_argument("--zero", type=int, choices=(0, 1), default=0,
                   help="under mpirun, 1 shards AdamW's moments over the ranks (ZeRO-1), "
                   "each rank keeping and updating its shard; the same steps as 0 (default: 0)")
    g.add_argument("--deterministic", action="store_true",
                   help="the same bits for the same seed on one GPU: split-K's parts are "
                   "added in the order of the splits and the embedding's backward sorts "
                   "its positions, where both add by float atomics by default "
                   "(docs/convergence.md has the cost)")
    g.add_argument("--steps", type=positive_int, metavar="N",
                   help="optimizer steps in all" + by_default("steps"))
    g.add_argument("--batch-size", type=positive_int, metavar="B",
                   help="sequences per micro-batch, over all ranks" + by_default("batch_size"))
    g.add_argument("--grad-accum", type=positive_int, metavar="N", help="micro-batches per "
                   "optimizer step, their gradients summed before the update (and the "
                   "data-parallel all-reduce)" + by_default("grad_accum"))
    g.add_argument("--batch-tokens", type=positive_int, metavar="T", help="tokens per "
                   "optimizer step, over all ranks: sets --grad-accum to T / (--batch-size x "
                   "context), which must be whole")
    g.add_argument("--seed", type=non_negative(int), metavar="N",
                   help="model init and batch order" + by_default("seed"))
    g = p.add_argument_group("optimizer (AdamW, warmup then cosine)")
    g.add_argument("--lr", type=positive_float, metavar="LR",
                   help="peak learning rate" + by_default("lr"))
    g.add_argument("--warmup", type=non_negative(int), metavar="N",
                   help="linear warmup steps (default: 5%% of --steps)")
    g.add_argument("--min-lr-ratio", type=number_in(float, 0, 1, high_open=False,
                                                    what="a number in [0, 1]"),
                   metavar="R", help="the cosine ends at R x --lr" + by_default("min_lr_ratio"))
    g.add_argument("--weight-decay", type=non_negative(float), metavar="WD",
                   help="decoupled weight decay of the matrices (not of the LayerNorms, "
                   "biases)" + by_default("weight_decay"))
    g.add_argument("--beta1", type=unit_interval, metavar="B1", help="Adam's first-moment "
                   "decay" + by_default("beta1"))
    g.add_argument("--beta2", type=unit_interval, metavar="B2", help="Adam's second-moment "
                   "decay" + by_default("beta2"))
    g.add_argument("--eps", type=positive_float, metavar="EPS",
                   help="Adam's epsilon" + by_default("eps"))
    g.add_argument("--grad-clip", type=non_negative(float), metavar="NORM", help="clip the "
                   "gradient's global norm to NORM, 0 for no clip" + by_default("grad_clip"))
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
    return p


def by_default(key):
    return f" (default: {DEFAULTS[key]:g})" if isinstance(DEFAULTS[key], float) \
        else f" (default: {DEFAULTS[key]})"


def flags(parser):
    """dest -> the parser's action, for every option but --help (argparse keeps no public
    table of them)."""
    return {a.dest: a for a in parser._actions if a.option_strings and a.dest != "help"}


def parse_args(argv):
    """-> argparse.Namespace; a flag not given (on the command line or in --config-file)
    is None, which resolve_args fills in."""
    parser = build_parser()
    ns = parser.parse_args(argv)
    if ns.config_file is None:
        return ns
    parser.set_defaults(**read_config_file(Path(ns.config_file), flags(parser)))
    return parser.parse_args(argv)      # the command line over the file's values


def read_config_file(path, actions):
    """A TOML file of options -> {dest: value}, each value checked by its flag's type."""
    where = f"--config-file {path}"
    try:
        import tomllib
    except ModuleNotFoundError:     # Python 3.10
        try:
            import tomli as tomllib
        except ModuleNotFoundError:
            raise UserError(f"{where}: reading TOML needs Python 3.11 or later (tomllib), or "
                            "the tomli package on 3.10: pip install tomli") from None
    try:
        with open(path, "rb") as f:
            table = tomllib.load(f)
    except OSError as err:
        raise UserError(f"{where} cannot be read ({err.strerror}); pass a TOML file") from None
    except tomllib.TOMLDecodeError as err:
        raise UserError(f"{where} is not valid TOML ({err})") from None
    values = {}
    for key, value in table.items():
        dest = key.replace("-", "_")
        action = actions.get(dest)
        if action is None or dest == "config_file":
            raise UserError(f"{where}: unknown option {key!r}; its keys are the flags' names "
                            "without the dashes (see --help)")
        try:
            values[dest] = flag_value(action, value)
        except argparse.ArgumentTypeError as err:
            raise UserError(f"{where}: {key} {err}") from None
    return values


def flag_value(action, value):
    """value (from TOML or JSON) -> what the flag would parse it to, or ArgumentTypeError."""
    switch = action.nargs == 0          # a flag without a value (store_true)
    if isinstance(value, (dict, list)) or isinstance(value, bool) != switch:
        raise argparse.ArgumentTypeError(
            f"must be {'true or false' if switch else 'one value'}, got {value!r}")
    if switch:
        return value
    parsed = action.type(str(value)) if action.type else str(value)
    if action.choices is not None and parsed not in action.choices:
        raise argparse.ArgumentTypeError(f"must be one of {', '.join(action.choices)}, got "
                                         f"{value!r}")
    return parsed


def resolve_args(ns, saved):
    """argparse's namespace (None where not given) + a checkpoint's saved args -> TrainArgs.
    On --resume the PINNED fields come from the checkpoint; a different value is an error."""
    given = {f.name: getattr(ns, f.name) for f in dataclasses.fields(TrainArgs)}
    for key in ("data", "tokenizer", "init_from"):  # absolute, so --resume works from anywhere
        if given[key] is not None and given[key] not in ("bpe", "bytes"):
            given[key] = str(Path(given[key]).resolve())
    if getattr(ns, "batch_tokens", None) is not None:
        given["grad_accum"] = grad_accum_for(ns.batch_tokens, given, saved)
    if saved is None:
        values = {k: v if v is not None else DEFAULTS.get(k) for k, v in given.items()}
        if given["init_from"] is not None:      # the model is the directory's
            values["config"] = given["config"]
        if values["warmup"] is None:
            values["warmup"] = values["steps"] // 20
        return TrainArgs(**values)
    saved = {**ADDED, **saved} if isinstance(saved, dict) else {}
    missing = given.keys() - saved.keys()
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


def grad_accum_for(batch_tokens, given, saved):
    """--batch-tokens -> the micro-batches per step that make it up (--grad-accum, when
    given too, must agree)."""
    batch = given["batch_size"] or (saved or {}).get("batch_size") or DEFAULTS["batch_size"]
    context = given["context"] or (saved or {}).get("context")
    if context is None:
        name = given["config"] or (saved or {}).get("config") or DEFAULT_CONFIG
        context = CONFIGS.get(name, {}).get("context")
    if context is None:
        raise UserError("--batch-tokens needs the model's context: pass --context or a "
                        "--config, or --grad-accum instead")
    per_micro = batch * context
    if batch_tokens % per_micro:
        raise UserError(f"--batch-tokens {batch_tokens} is not a whole number of micro-batches "
                        f"of --batch-size {batch} x context {context} = {per_micro:,} tokens; "
                        f"pass a multiple of {per_micro}")
    accum = batch_tokens // per_micro
    if given["grad_accum"] is not None and given["grad_accum"] != accum:
        raise UserError(f"--grad-accum {given['grad_accum']} and --batch-tokens {batch_tokens} "
                        f"disagree (that is {accum} micro-batches of {per_micro:,} tokens); "
                        "pass one of them")
    return accum


def check_saved_args(saved):
    """The arguments in a checkpoint's state.json have the types and ranges the command line
    allows (a hand-edited file must fail here, in one line, not deep in the run)."""
    actions = flags(build_parser())
    for field in dataclasses.fields(TrainArgs):
        value = saved[field.name]
        kind = {int: int, int | None: int, float: float}.get(field.type, str)
        if value is None:
            ok = "None" in str(field.type)
        elif not (type(value) is kind or kind is float and type(value) is int):
            ok = False
        else:
            try:
                flag_value(actions[field.name], value)
                ok = True
            except argparse.ArgumentTypeError:
                ok = False
        if not ok:
            raise UserError(f"the checkpoint's state.json is damaged (args.{field.name} is "
                            f"{value!r}); it cannot be resumed, use another checkpoint")
