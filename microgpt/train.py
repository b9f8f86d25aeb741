"""Train a GPT: ``python -m microgpt.train [options]`` (docs/training.md).

With no arguments it trains, on the CPU, a small member of the microgpt family on the
Python standard library's own source: long enough to learn visibly, short enough (under
four minutes on two cores, tokenizer included) to watch to the end. The trainer drives the
model through its public API only, so it runs unchanged on any backend.
"""
import contextlib
import dataclasses
import fcntl
import math
import os
import signal
import sys
import threading
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from microgpt import distributed
from microgpt.checkpoint import (LATEST, atomic_file, find_checkpoint, load_checkpoint,
                                 remove_stale_temporaries, save_checkpoint)
from microgpt.config import CONFIGS, ConfigError, get_config
from microgpt.data import (BatchLoader, default_cache_dir, load_tokens, shard_paths,
                           tokens_signature, unigram_entropy)
from microgpt.cli import (DEVICES, EXIT_INTERRUPTED, EXIT_USER_ERROR, ArgumentParser,
                          Terminated, backend_for, choose_precision, exit_status,
                          make_backend, non_negative, positive_float, positive_int, run_cli)
from microgpt.errors import BackendError, UserError, file_kind
from microgpt.metrics import METRICS, MetricsLog, Utilisation, plot_losses, read_metrics
from microgpt.optim import AdamW, AdamWConfig
from microgpt.model import GPT, PRECISIONS
from microgpt.params import ParamLayout
from microgpt.sample import sample_text
from microgpt.step import LOG_ROWS, Step, step_specs
from microgpt.tokenizer import BPETokenizer, ByteTokenizer, TokenIds

PROG = "microgpt.train"
EXIT_DIVERGED = 1
# A loss this many times a uniform guess's (ln V; a fresh model starts near 1x) means the
# run diverged. Measured on the microgpt config (docs/training.md): runs that peaked below
# 20x came back to a normal loss, the ones past 100x never did (or only to NaN).
DIVERGED_LOSS_RATIO = 100.0

# The run with no arguments. docs/training.md has the measurements behind it: in five
# minutes on two cores, one layer taking many steps ends lower than deeper, slower models.
CPU_DEFAULT_MODEL = dict(n_layer=1, d_model=128, n_head=4, context=128)
DEFAULT_BPE_VOCAB = 1024
DEFAULTS = dict(steps=1200, batch_size=16, lr=3e-3, eval_every=200, eval_batches=16,
                sample_every=400, checkpoint_every=400, log_every=20, seed=0)
SAMPLE_TOKENS = 120          # per sample printed during training
FINAL_SAMPLES = 2            # written to samples.txt at the end, FINAL_SAMPLE_TOKENS each
FINAL_SAMPLE_TOKENS = 200


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
NON_NEGATIVE = ("warmup", "seed", "eval_every", "sample_every", "checkpoint_every")


# ----------------------------------------------------------------------------------
# arguments

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
    g.add_argument("--cache-dir", metavar="DIR", help="where tokenizers and token shards are "
                   f"cached (default: $MICROGPT_CACHE_DIR or {default_cache_dir()})")
    g = p.add_argument_group("training")
    g.add_argument("--device", choices=DEVICES, default="auto",
                   help="cpu runs NumPy, cuda the GPU kernels; auto takes a GPU if there is one")
    g.add_argument("--precision", choices=PRECISIONS,
                   help="bf16: the GEMMs and attention on the tensor cores with bf16 operands, "
                   "float32 master weights, moments and statistics (cuda only); fp32: float32 "
                   "throughout (default: bf16 on a GPU with bf16 tensor cores, else fp32)")
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
    g.add_argument("--eval-batches", type=positive_int, metavar="N",
                   help="batches in the validation set" + by_default("eval_batches"))
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


def check_output_dir(out, own_run, fresh_name=False):
    """Fail before any work if out cannot be written, or would mix two runs (own_run: the
    directory of the run being resumed, or None; fresh_name: out is the default name, which
    RunDirectory changes rather than share)."""
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out} is {file_kind(out)}, not a directory; pass a directory "
                        "for the run (it is created if missing)")
    if (not fresh_name and (out / LATEST).exists()
            and (own_run is None or out.resolve() != own_run.resolve())):
        raise UserError(f"--out {out} already holds a run; continue it with --resume {out} "
                        "or pass another --out")
    existing = out
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        raise UserError(f"--out {out} cannot be written ({existing} is not a writable "
                        "directory); pass a writable --out DIR")


class RunDirectory:
    """The run directory, created if missing and locked while the run lasts, so that two runs
    given the same --out cannot overwrite each other's checkpoints. With fresh_name, out is
    the default runs/DATE-TIME that a run started in the same second also picks: this run
    then takes runs/DATE-TIME-2 (-3, ...). A directory the run created and left empty (it
    stopped before its first checkpoint) is removed on the way out, and so are the parents
    it created for it (the default's runs/) where they are left empty."""

    def __init__(self, out, own_run, fresh_name):
        self.out, self.own_run, self.fresh_name = out, own_run, fresh_name
        self.created, self.fd = False, None
        self.made_parents = []      # nearest first

    def __enter__(self):
        try:
            self._create()
            self.fd = os.open(self.out, os.O_RDONLY | os.O_DIRECTORY)
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            # a run that ended there since check_output_dir looked has left its checkpoint
            check_output_dir(self.out, self.own_run)
            remove_stale_temporaries(self.out, owned=True)
        except BlockingIOError:
            self.__exit__()
            raise UserError(f"--out {self.out} is in use by another training run; wait for it "
                            "to end, or pass another --out") from None
        except OSError as err:
            self.__exit__()
            raise UserError(f"--out {self.out} cannot be written ({err.strerror}); pass a "
                            "writable --out DIR") from None
        except BaseException:
            self.__exit__()
            raise
        return self.out

    def _create(self):
        base = self.out
        # the renamed directories share base's parents: which of them this run makes is
        # known before the first try (a later try would find them made, by this run)
        self.made_parents = [p for p in base.parents if not p.exists()]
        for n in range(2, 10_000):
            try:
                self.out.parent.mkdir(parents=True, exist_ok=True)
                os.mkdir(self.out)
                self.created = True
                return
            except FileExistsError:
                if not self.fresh_name:
                    return
                self.out = base.with_name(f"{base.name}-{n}")

    def __exit__(self, *exc):
        if self.fd is not None:
            os.close(self.fd)         # releases the lock
            self.fd = None
        if self.created:
            with contextlib.suppress(OSError):
                if not (self.out / LATEST).exists():    # no run to continue: no metrics
                    (self.out / METRICS).unlink(missing_ok=True)
                os.rmdir(self.out)    # only succeeds on an empty directory
                for parent in self.made_parents:
                    os.rmdir(parent)


# ----------------------------------------------------------------------------------
# setting up a run

def planned_tokenizer(args, shards):
    """--tokenizer -> a tokenizer object, or None for "train BPE on the corpus"."""
    if args.tokenizer == "bytes":
        return ByteTokenizer()
    if args.tokenizer in (None, "bpe"):
        if shards and args.tokenizer == "bpe":
            raise UserError("--tokenizer bpe trains on text, but --data holds token shards; pass "
                            "the tokenizer.json they were made with, or no --tokenizer")
        return None
    path = Path(args.tokenizer)
    if not path.is_file():
        raise UserError(f"--tokenizer {args.tokenizer} is not bpe, bytes or a tokenizer.json file")
    return BPETokenizer.from_file(path)


def model_config(args, vocab_size):
    """The GPTConfig the arguments describe, with vocab_size where neither --vocab-size nor
    the named config fixes one."""
    name = args.config or "microgpt"
    overrides = dict(CPU_DEFAULT_MODEL) if args.config is None else {}
    overrides.update({k: getattr(args, k) for k in ("n_layer", "d_model", "n_head", "context",
                                                     "vocab_size") if getattr(args, k) is not None})
    overrides.setdefault("vocab_size", CONFIGS.get(name, {}).get("vocab_size") or vocab_size)
    return get_config(name, **overrides)


@dataclass
class Run:
    """A run ready to train: everything the loop touches."""
    args: TrainArgs
    out: Path
    model: object
    optimizer: AdamW
    tokenizer: object
    loader: BatchLoader
    val_batches: list       # [(inputs, targets)], int32 (B, T) each
    entropy: float
    step: int               # optimizer steps taken
    history: dict           # "train": [loss per step], "val": [[step, loss], ...]
    world: object           # distributed.SingleProcess, or this rank's data-parallel world
    data_signature: str     # data.tokens_signature of the tokens, kept in every checkpoint
    train_step: Step        # the device buffers of a step, and its captured graph

    @property
    def rows(self):
        """This rank's rows of every (global) batch."""
        local = self.args.batch_size // self.world.world_size
        return slice(self.world.rank * local, (self.world.rank + 1) * local)

    @property
    def lead(self):
        """Rank 0 logs, samples and writes checkpoints; the others only train."""
        return self.world.rank == 0


def setup(ns, world, backend, resources):
    """Check every input, then load or build everything the loop needs -> Run. The run
    directory's lock is entered into resources (a contextlib.ExitStack) and held to the end.
    Under mpirun the ranks fail together (on_every_rank) and check that they agree."""
    ckpt, args = on_every_rank(world, lambda: resume_args(ns))
    check_ranks_agree(world, "arguments", dataclasses.asdict(args))
    start = ckpt.state["step"] if ckpt else 0
    out = on_every_rank(world, lambda: claim_output(ns, ckpt, args, world, resources))
    cache_dir = ns.cache_dir or default_cache_dir()

    def load():
        try:
            data, config = load_data(args, ckpt, cache_dir, world, backend, ns.precision)
        finally:
            if world.rank == 0:
                world.barrier()
        return data, config, tokens_signature(data)
    if world.rank != 0:       # rank 0 trains the tokenizer and fills the cache; the rest read it
        world.barrier()
    data, config, signature = on_every_rank(world, load)
    check_ranks_agree(world, "data", signature)
    saved_signature = ckpt.state.get("data_signature") if ckpt else None
    if saved_signature is not None and saved_signature != signature:
        raise UserError(f"the data changed since the checkpoint was written ({data.source} "
                        "holds other tokens now); resume with the data the run trained on, or "
                        "start a new run")
    tokenizer = data.tokenizer

    T = config.context
    loader = BatchLoader(data.train, args.batch_size, T, config.vocab_size, args.seed)
    val_batches = BatchLoader(data.val, args.batch_size, T, config.vocab_size, args.seed,
                              split="validation").fixed_batches(args.eval_batches)
    model = GPT(config, backend=backend, seed=args.seed,
                precision=choose_precision(ns.precision, backend, config))
    optimizer = AdamW(model, AdamWConfig(lr=args.lr, warmup_steps=args.warmup,
                                         total_steps=args.steps))
    entropy = unigram_entropy(data.train, config.vocab_size)
    train_step = Step(model, optimizer, args.batch_size // world.world_size, T,
                      sync=world.gradient_sync(model),
                      graph=os.environ.get("MICROGPT_GRAPH", "1") != "0")
    run = Run(args, out, model, optimizer, tokenizer, loader, val_batches, entropy, start,
              {"train": [], "val": []}, world, signature, train_step)
    if ckpt:
        restore(run, ckpt)
    if not run.lead:
        return run
    if world.world_size > 1:
        print(f"data parallel: {world.world_size} ranks, {args.batch_size // world.world_size} "
              "sequences each per step")
    print(f"model: {describe(config)}, {model.layout.size:,} parameters, on "
          f"{model.backend.name} in {model.precision}")
    print(f"data: {data.source}, {sum(map(len, data.train)):,} train and "
          f"{sum(map(len, data.val)):,} val tokens ({tokenizer.kind} tokenizer, "
          f"{tokenizer.vocab_size} tokens); unigram entropy {entropy:.3f} nats/token")
    print(f"run: {args.steps} steps of {args.batch_size} x {T} tokens, lr {args.lr:g} "
          f"(warmup {args.warmup}, cosine to {args.lr * optimizer.cfg.min_lr_ratio:g}), "
          f"out {out}", flush=True)
    return run


def resume_args(ns):
    """-> (the checkpoint to resume or None, TrainArgs)."""
    ckpt = load_checkpoint(ns.resume) if ns.resume else None
    return ckpt, resolve_args(ns, ckpt.state.get("args", {}) if ckpt else None)


def claim_output(ns, ckpt, args, world, resources):
    """Check what the step counts allow, then take the run directory (rank 0) -> its path."""
    if args.batch_size % world.world_size:
        raise UserError(f"--batch-size {args.batch_size} (the global batch) must divide among "
                        f"{world.world_size} ranks; pass a multiple of {world.world_size}")
    start = ckpt.state["step"] if ckpt else 0
    if start >= args.steps:
        raise UserError(f"the checkpoint is at step {start} of --steps {args.steps}: nothing "
                        "left to train; pass a larger --steps to go on")
    if args.warmup > args.steps:
        raise UserError(f"--warmup {args.warmup} is longer than the run (--steps {args.steps}); "
                        "pass a --warmup below --steps (default: 5% of --steps)")
    if ns.stop_at is not None and not start < ns.stop_at <= args.steps:
        raise UserError(f"--stop-at {ns.stop_at} must lie after step {start} and at most "
                        f"--steps {args.steps}")
    own_run = ckpt.path.parent if ckpt else None
    out = Path(ns.out) if ns.out else (own_run or default_out())
    fresh_name = not ns.out and not ckpt
    check_output_dir(out, own_run, fresh_name)
    if world.rank == 0:
        out = resources.enter_context(RunDirectory(out, own_run, fresh_name))
    return out


def default_out():
    """runs/DATE-TIME, the run directory when --out is not given."""
    return Path("runs") / time.strftime("%Y%m%d-%H%M%S")


def on_every_rank(world, work):
    """work() -> its result. Under mpirun a user error on any rank is raised on every rank
    here, at the same point (and reported by rank 0): a rank that failed alone would leave
    the others waiting for it in their next collective. work must not communicate, but
    for the barrier of rank 0."""
    try:
        result, failure = work(), None
    except (UserError, ConfigError, BackendError) as err:
        if world.world_size == 1:
            raise
        result, failure = None, str(err)
    failed = [(rank, f) for rank, f in enumerate(world.allgather(failure)) if f is not None]
    if failed:
        rank, message = failed[0]
        raise distributed.CollectiveError(message if rank == 0 else f"rank {rank}: {message}")
    return result


def check_ranks_agree(world, what, value):
    """Every data-parallel rank must train the same run: different arguments or data would
    average gradients of different batches. All ranks take part and fail together; rank 0
    alone says why."""
    values = world.allgather(value)
    for rank, theirs in enumerate(values):
        if theirs != values[0]:
            if isinstance(value, dict):
                key = next(k for k in value if theirs.get(k) != values[0].get(k))
                detail = f"--{key.replace('_', '-')} {theirs.get(key)} against {values[0][key]}"
            else:
                detail = f"{theirs} against {values[0]}"
            raise distributed.CollectiveError(
                f"rank {rank} has other {what} than rank 0 ({detail}); start every rank with "
                "the same arguments and data")


def load_data(args, ckpt, cache_dir, world, backend, requested_precision):
    """-> (TokenData whose tokenizer is set, GPTConfig). The config, and the memory it needs,
    are checked before the slow part (training a tokenizer, tokenizing); its vocabulary can
    come from the tokenizer."""
    if ckpt:
        tokenizer, config = ckpt.tokenizer, ckpt.config
    else:
        shards = args.data is not None and bool(shard_paths(Path(args.data)))
        tokenizer = planned_tokenizer(args, shards)
        config = model_config(args, tokenizer.vocab_size if tokenizer else DEFAULT_BPE_VOCAB)
    check_memory(config, args, world, backend,
                 choose_precision(requested_precision, backend, config))
    data = load_tokens(args.data, tokenizer, config.vocab_size, cache_dir)
    data.tokenizer = data.tokenizer or TokenIds(config.vocab_size)
    if not ckpt:
        config = model_config(args, data.tokenizer.vocab_size)
    if config.vocab_size < data.tokenizer.vocab_size:
        raise UserError(f"the tokenizer has {data.tokenizer.vocab_size} tokens but the model's "
                        f"vocabulary is {config.vocab_size}; pass --vocab-size "
                        f"{data.tokenizer.vocab_size} or more")
    return data, config


def check_memory(config, args, world, backend, precision):
    """Refuse, in one line, a run that cannot fit: what it needs at least (parameters,
    gradients and AdamW moments, in bf16 the copy of the matrices, the activations of one
    batch, the validation batches) against the memory available to this rank."""
    rows = args.batch_size // world.world_size
    T = config.context
    step_bytes = sum(math.prod(b.shape) * (b.per_layer or 1) * (2 if b.dtype == "uint16" else 4)
                     for b in step_specs(config, rows, T, precision) if b.same_as is None)
    layout = ParamLayout(config)
    need = (4 * 4 * layout.size + (2 * layout.n_decay if precision == "bf16" else 0)
            + step_bytes + 8 * args.eval_batches * rows * T)
    n_params = layout.size
    where, available = available_memory(backend)
    if available is not None and need > available:
        gib = 2 ** 30
        raise UserError(f"the run needs at least {need / gib:,.1f} GiB ({n_params:,} parameters, "
                        f"batches of {rows:,} x {T} tokens) but {where} has "
                        f"{available / gib:,.1f} GiB available; pass a smaller --batch-size, "
                        "--eval-batches, --context or model")


def available_memory(backend):
    """-> (where, bytes available): the GPU's free memory on the cuda backend, else Linux's
    MemAvailable; bytes is None where it cannot be told."""
    if backend.name == "cuda":
        from numba import cuda
        free = cuda.current_context().get_memory_info().free
        return "the GPU", free if math.isfinite(free) else None     # the simulator says inf
    try:
        with open("/proc/meminfo") as f:
            fields = dict(line.split(":", 1) for line in f)
        return "this machine", int(fields["MemAvailable"].split()[0]) * 1024
    except (OSError, KeyError, ValueError):
        return "this machine", None


def restore(run, ckpt):
    """Put the checkpoint's parameters, moments, loader RNG and history into run."""
    run.model.load_state_dict(ckpt.params)
    try:
        run.optimizer.load_state_dict(ckpt.moments, ckpt.state["optimizer"])
        run.loader.load_state_dict(ckpt.state["loader"])
        history = ckpt.state["history"]
        run.history = {"train": [float(x) for x in history["train"]],
                       "val": [[int(s), float(x)] for s, x in history["val"]]}
    except (KeyError, TypeError, ValueError) as err:
        raise UserError(f"checkpoint {ckpt.path}: state.json is damaged ({err!r}); it cannot "
                        "be resumed, use another checkpoint") from None
    if len(run.history["train"]) != run.step:
        raise UserError(f"checkpoint {ckpt.path}: state.json is damaged (a loss history of "
                        f"{len(run.history['train'])} steps at step {run.step}); it cannot be "
                        "resumed, use another checkpoint")
    if run.lead:
        print(f"resuming {ckpt.path} at step {run.step}")


def describe(config):
    return ", ".join(f"{f.name} {getattr(config, f.name)}" for f in dataclasses.fields(config))


# ----------------------------------------------------------------------------------
# the loop

class StopRequest:
    """Ctrl-C or SIGTERM (what timeout, Slurm and Kubernetes send) during training asks the
    loop to stop after the current step, so the checkpoint it saves is a consistent one; a
    second signal quits at once. signum: the signal that asked, or None."""
    NAMES = {signal.SIGINT: "Ctrl-C", signal.SIGTERM: "SIGTERM"}

    def __enter__(self):
        self.signum = None
        self._previous = {}
        if threading.current_thread() is threading.main_thread():
            self._previous = {s: signal.signal(s, self._handle) for s in self.NAMES}
        return self

    @property
    def requested(self):
        return self.signum is not None

    def _handle(self, signum, frame):
        if self.requested:
            raise KeyboardInterrupt if signum == signal.SIGINT else Terminated
        self.signum = signum
        name = self.NAMES[signum]
        print(f"\n{name}: stopping after this step to save a checkpoint "
              f"({name} again quits without saving)", file=sys.stderr, flush=True)

    def __exit__(self, *exc):
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)


class Progress:
    """Log lines on stdout; on a terminal, also a live line on stderr between them. A
    silent one (the data-parallel ranks but the first) only keeps the step times. With
    metrics (a MetricsLog) every log line is also a record there; utilisation (a
    metrics.Utilisation) adds the MFU."""

    def __init__(self, total_steps, silent=False, metrics=None, utilisation=None):
        self.total = total_steps
        self.silent = silent
        self.metrics, self.utilisation = metrics, utilisation
        self.live = sys.stderr.isatty() and not silent
        self.step_times = []          # seconds per step since the last log line

    def step(self, step, loss, seconds):
        self.step_times.append(seconds)
        if self.live:
            eta = (self.total - step) * seconds
            sys.stderr.write(f"\rstep {step}/{self.total} | loss {loss:.4f} | "
                             f"{seconds * 1e3:.0f} ms/step | eta {format_duration(eta)}  ")
            sys.stderr.flush()

    def log(self, line):
        if self.silent:
            return
        if self.live:
            sys.stderr.write("\r\033[K")
        print(line, flush=True)

    def log_step(self, step, loss, val, lr, norm, tokens_per_step):
        seconds = float(np.mean(self.step_times))
        self.step_times = []
        val_text = f" | val {val:.4f}" if val is not None else ""
        tokens_per_s = tokens_per_step / seconds
        mfu = self.utilisation.mfu(tokens_per_s) if self.utilisation else None
        mfu_text = f" | mfu {mfu:.1%}" if mfu is not None else ""
        self.log(f"step {step:>{len(str(self.total))}}/{self.total} | loss {loss:.4f}{val_text} | "
                 f"lr {lr:.2e} | norm {norm:.4f} | {seconds * 1e3:.0f} ms/step | "
                 f"{tokens_per_s:,.0f} tok/s{mfu_text}")
        if self.metrics:
            self.metrics.write(step=step, loss=loss, val_loss=val, lr=lr, grad_norm=norm,
                               tokens_per_s=round(tokens_per_s, 1), mfu=mfu)


def train(run, stop_at):
    """Run the loop to args.steps (or stop_at, or a signal) -> exit status."""
    args, model, world = run.args, run.model, run.world
    utilisation = Utilisation(model.config, model.backend, world.world_size,
                              model.precision)
    progress = Progress(args.steps, silent=not run.lead, utilisation=utilisation,
                        metrics=MetricsLog(run.out, run.step) if run.lead else None)
    tokens_per_step = args.batch_size * model.config.context
    started = time.perf_counter()
    first_step = run.step
    if run.lead and utilisation.peak:
        progress.log(f"mfu: {utilisation.flops_per_token / 1e9:.2f} GFLOP per token over the "
                     f"{model.precision} peak of {world.world_size} x {utilisation.device}, "
                     f"{utilisation.peak / world.world_size / 1e12:g} TFLOP/s each")
    if run.lead and model.backend.name == "cuda":
        progress.log("compiling kernels ...")
    read_at = time.perf_counter()
    # overflow on the way to a divergence is reported once, by healthy(), not op by op
    with StopRequest() as stop, np.errstate(all="ignore"):
        while run.step < args.steps:
            inputs, targets = run.loader.next_batch()
            run.train_step.run(inputs[run.rows], targets[run.rows])
            run.step += 1
            last = run.step == args.steps
            due_eval = last or (args.eval_every and run.step % args.eval_every == 0)
            due_sample = (run.lead and args.sample_every and run.step % args.sample_every == 0
                          and not last)
            due_checkpoint = last or (args.checkpoint_every
                                      and run.step % args.checkpoint_every == 0)
            interrupted = world.any(stop.requested)
            stopping = interrupted or (run.step == stop_at and not last)
            due_log = last or run.step == 1 or run.step % args.log_every == 0
            if not (due_log or due_eval or due_sample or due_checkpoint or stopping
                    or run.train_step.unread == LOG_ROWS):
                continue    # the host runs ahead: nothing is read back between log lines
            # the one read back: every step's loss, norm and lr since the last one
            logged = run.train_step.metrics()
            losses = world.mean(logged["loss"])
            now = time.perf_counter()
            seconds, read_at = (now - read_at) / len(losses), now
            first = run.step - len(losses) + 1
            for i, loss in enumerate(losses):
                run.history["train"].append(float(loss))
                if not healthy(loss, model.config):
                    return diverged(run, f"the loss at step {first + i} is {loss:.4g}")
                progress.step(first + i, loss, seconds)
            loss, norm, lr = losses[-1], logged["grad_norm"][-1], logged["lr"][-1]
            val = None
            if due_eval:
                val = evaluate(run)
                run.history["val"].append([run.step, val])
            if due_log or val is not None:
                progress.log_step(run.step, loss, val, lr, norm, tokens_per_step)
            if due_sample:
                text = sample_text(model, run.tokenizer, "", SAMPLE_TOKENS,
                                   seed=args.seed + run.step)
                progress.log(f"--- sample at step {run.step} ---\n{text}\n---")
            if stopping:
                unhealthy = save(run, progress, val)
                if unhealthy is not None:
                    return diverged(run, unhealthy)
                progress.log(f"stopped at step {run.step}; continue with: python -m "
                             f"microgpt.train --resume {run.out}")
                if not interrupted:
                    return 0
                return exit_status(stop.signum) if stop.requested else EXIT_INTERRUPTED
            if due_checkpoint:
                unhealthy = save(run, progress, val)
                if unhealthy is not None:
                    return diverged(run, unhealthy)
            read_at = time.perf_counter()   # evaluation, samples and checkpoints not counted
    elapsed = time.perf_counter() - started
    if run.lead:
        finish(run, progress, elapsed, run.step - first_step)
    return 0


def healthy(loss, config):
    """A finite loss below DIVERGED_LOSS_RATIO times a uniform guess's."""
    return math.isfinite(loss) and loss < DIVERGED_LOSS_RATIO * math.log(config.vocab_size)


def diverged(run, what):
    """Report a divergence in one line (rank 0) -> the exit status. Nothing is written:
    the run directory keeps the last checkpoint whose loss was healthy."""
    if run.lead:
        latest = run.out / LATEST
        kept = (f"the last healthy checkpoint, {run.out / latest.read_text().strip()}, is kept"
                if latest.is_file() else "no checkpoint was written before it")
        print(f"{PROG}: training diverged: {what}, beyond {DIVERGED_LOSS_RATIO:g} x ln(vocab); "
              f"{kept}; start again with a smaller --lr", file=sys.stderr, flush=True)
    return EXIT_DIVERGED


def evaluate(run):
    """Mean loss over the fixed validation batches, each rank taking its rows."""
    local = np.mean([run.train_step.evaluate(x[run.rows], y[run.rows])
                     for x, y in run.val_batches])
    return run.world.mean(float(local))


def save(run, progress, val):
    """Checkpoint the parameters the last step left, if their loss is healthy (val, else the
    loss on the first validation batch) -> None, or what kept them from being written."""
    if val is None:
        x, y = run.val_batches[0]
        val = run.world.mean(run.train_step.evaluate(x[run.rows], y[run.rows]))
    if not healthy(val, run.model.config):
        return f"the parameters after step {run.step} have a loss of {val:.4g}"
    on_every_rank(run.world, lambda: write_checkpoint(run, progress) if run.lead else None)
    return None


def write_checkpoint(run, progress):
    state = {"step": run.step, "loader": run.loader.state_dict(),
             "args": dataclasses.asdict(run.args), "history": run.history,
             "data_signature": run.data_signature}
    path = save_checkpoint(run.out, run.model, run.optimizer, run.tokenizer, state)
    metrics = run.out / METRICS
    records = read_metrics(metrics) if metrics.exists() else []
    write_output(run, path, "loss.png", lambda tmp: plot_losses(records, run.entropy, tmp))
    progress.log(f"checkpoint: {path}")


def write_output(run, checkpoint, name, write):
    """write(temporary path) makes run.out / name, which then replaces the old one at once.
    A full disk stops the run here, in one line: the checkpoint is already complete."""
    try:
        atomic_file(run.out / name, write)
    except OSError as err:
        raise UserError(f"cannot write {run.out / name} ({err.strerror}); {checkpoint} is "
                        f"saved: free some space, then continue with --resume {run.out}") from None


def finish(run, progress, elapsed, steps_taken):
    samples = [sample_text(run.model, run.tokenizer, "", FINAL_SAMPLE_TOKENS,
                           seed=run.args.seed + i) for i in range(FINAL_SAMPLES)]
    text = "".join(f"--- sample {i + 1} ---\n{s}\n" for i, s in enumerate(samples))
    write_output(run, find_checkpoint(run.out), "samples.txt",
                 lambda tmp: tmp.write_text(text, encoding="utf-8"))
    val = run.history["val"][-1][1]
    progress.log(f"--- samples ---\n{samples[0]}\n---")
    progress.log(f"done: {steps_taken} steps in {format_duration(elapsed)}; val loss {val:.4f} "
                 f"nats/token (unigram entropy {run.entropy:.4f})")
    progress.log(f"loss curve {run.out / 'loss.png'}, samples {run.out / 'samples.txt'}; "
                 f"sample more with: python -m microgpt.sample --checkpoint {run.out}")


def format_duration(seconds):
    minutes, seconds = divmod(int(round(seconds)), 60)
    return f"{minutes}m{seconds:02d}s" if minutes else f"{seconds}s"


# ----------------------------------------------------------------------------------

def run_training(argv):
    ns = parse_args(argv)
    # under mpirun this also picks the rank's GPU, before the backend allocates anything;
    # a device that cannot run here fails now, before any data work
    world = distributed.init(backend_for(ns.device))
    try:
        with contextlib.ExitStack() as resources, warnings.catch_warnings():
            # numba's advice for small launches (the microgpt config's) is not the user's
            warnings.filterwarnings("ignore", message=r"(?s).*Grid size \d+ will likely "
                                    "result in GPU under-utilization")
            backend = make_backend(ns.device)
            run = setup(ns, world, backend, resources)
            return train(run, ns.stop_at)
    except distributed.CollectiveError:
        if world.rank != 0:
            return EXIT_USER_ERROR
        raise
    except (UserError, ConfigError, BackendError) as err:
        if world.world_size == 1:
            raise
        # a failure outside on_every_rank: the others may wait for this rank forever
        print(f"{PROG}: error: {err}", file=sys.stderr, flush=True)
        world.abort(EXIT_USER_ERROR)
        raise


def main(argv=None):
    return run_cli(PROG, run_training, argv)


if __name__ == "__main__":
    sys.exit(main())
