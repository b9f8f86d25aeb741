"""Setting up a run: every input checked, then the model, optimizer, data and step built
(or restored from a checkpoint) into a Run, everything the training loop touches."""
import dataclasses
import hashlib
import math
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from microgpt import distributed
from microgpt.checkpoint import load_checkpoint
from microgpt.cli import choose_precision
from microgpt.config import CONFIGS, DEFAULT_CONFIG, get_config
from microgpt.data import (BatchLoader, default_cache_dir, load_tokens, shard_paths,
                           tokens_signature, unigram_entropy)
from microgpt.errors import UserError
from microgpt.hf_gpt2 import load_hf_gpt2
from microgpt.memory import check_memory
from microgpt.model import GPT
from microgpt.optim import AdamW, AdamWConfig
from microgpt.progress import KernelProgress
from microgpt.ranks import check_ranks_agree, on_every_rank
from microgpt.run_dir import RunDirectory, check_output_dir, default_out
from microgpt.step import Step
from microgpt.tokenizer import BPETokenizer, ByteTokenizer, TokenIds
from microgpt.train_args import DEFAULT_BPE_VOCAB, TrainArgs, resolve_args
from microgpt.zero import ShardedAdamW

# the model line's words for a recompute mode
RECOMPUTED_WORDS = {"off": "", "gelu": ", GELU's output recomputed in the backward",
                    "all": ", the LayerNorms' and GELU's outputs recomputed in the backward"}


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
    name = args.config or DEFAULT_CONFIG
    overrides = {k: getattr(args, k) for k in ("n_layer", "d_model", "n_head", "context",
                                               "vocab_size") if getattr(args, k) is not None}
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
    val_batches: list       # [(inputs, targets)], int32 (B, T) each (the whole split's last
                            # may have fewer rows)
    entropy: float
    step: int               # optimizer steps taken
    history: dict           # "train": [loss per step], "val": [[step, loss], ...]
    world: object           # distributed.SingleProcess, or this rank's data-parallel world
    data_signature: str     # data.tokens_signature of the tokens, kept in every checkpoint
    train_step: Step        # the device buffers of a step, and its captured graph
    kernels: KernelProgress | None      # cuda: the kernels compiled or loaded, as they come

    @property
    def rows(self):
        """This rank's rows of every (global) batch."""
        local = self.args.batch_size // self.world.world_size
        return slice(self.world.rank * local, (self.world.rank + 1) * local)

    def next_batch(self):
        """This rank's rows of the next optimizer step's grad_accum micro-batches -> inputs,
        targets (grad_accum x local rows, T), micro-batch by micro-batch."""
        parts = [self.loader.next_batch() for _ in range(self.args.grad_accum)]
        return tuple(np.concatenate([part[i][self.rows] for part in parts]) for i in (0, 1))

    @property
    def tokens_per_step(self):
        """Over all ranks and micro-batches."""
        return self.args.grad_accum * self.args.batch_size * self.model.config.context

    @property
    def lead(self):
        """Rank 0 logs, samples and writes checkpoints; the others only train."""
        return self.world.rank == 0


def setup(ns, world, backend, resources, compilers=None):
    """Check every input, then load or build everything the loop needs -> Run. The run
    directory's lock is entered into resources (a contextlib.ExitStack) and held to the end.
    Under mpirun the ranks fail together (on_every_rank) and check that they agree.
    compilers: start_compiling's, waited for before the first step: on the shape's
    first run (no manifest) the step is built before the tokens are made, and the
    kernels that its recording lists are compiled by them meanwhile."""
    ckpt, args = on_every_rank(world, lambda: resume_args(ns))
    # --zero too: ranks that shard and ranks that do not would wait in other collectives
    check_ranks_agree(world, "arguments", {**dataclasses.asdict(args), "zero": ns.zero})
    start = ckpt.state["step"] if ckpt else 0
    out = on_every_rank(world, lambda: claim_output(ns, ckpt, args, world, resources))
    cache_dir = ns.cache_dir or default_cache_dir()
    kernels = None
    if backend.name == "cuda":
        from microgpt.kernels import cache as kernel_cache    # numba only where it compiles

        kernels = KernelProgress(Path(cache_dir) / "kernels", silent=world.rank != 0)
        kernel_cache.use(kernels.directory, report=kernels)

    early = {}      # (config, precision, recompute mode) -> (model, optimizer, step) built
                    # before the tokens

    def before_tokens(config, precision, recompute):
        """A shape's first run (no manifest) with compilers: its step built now and its
        kernels, recorded, handed to them, to compile while the tokens are made."""
        if compilers is not None and kernels is not None:
            from microgpt.kernels import ahead

            name_manifest(kernels, step_shape(config, precision, recompute, args, world))
            if not ahead.manifest_jobs(kernels.manifest):
                built = early[config, precision, recompute] = build(
                    ns, args, world, backend, config, precision, recompute)
                compilers.hand(ahead.record(built[2].accumulate, built[2].update))

    def load():
        try:
            data, config, initial, recompute = load_data(
                args, ckpt, cache_dir, world, backend, ns.precision, sharded(ns, world),
                ns.recompute, before_tokens)
        finally:
            if world.rank == 0:
                world.barrier()
        return data, config, initial, recompute, tokens_signature(data)
    if world.rank != 0:       # rank 0 trains the tokenizer and fills the cache; the rest read it
        world.barrier()
    data, config, initial, recompute, signature = on_every_rank(world, load)
    check_ranks_agree(world, "data", signature)
    saved_signature = ckpt.state.get("data_signature") if ckpt else None
    if saved_signature is not None and saved_signature != signature:
        raise UserError(f"the data changed since the checkpoint was written ({data.source} "
                        "holds other tokens now); resume with the data the run trained on, or "
                        "start a new run")
    tokenizer = data.tokenizer

    T = config.context
    loader = BatchLoader(data.train, args.batch_size, T, config.vocab_size, args.seed)
    val_loader = BatchLoader(data.val, args.batch_size, T, config.vocab_size, args.seed,
                             split="validation")
    val_batches = (val_loader.fixed_batches(args.eval_batches) if args.eval_batches
                   else val_loader.whole_split())
    precision = choose_precision(ns.precision, backend, config)
    if kernels:
        name_manifest(kernels, step_shape(config, precision, recompute, args, world))
        if compilers is not None:
            compilers.wait(kernels.manifest)
    # the step built before the tokens serves if the tokenizer left the shape as it was
    # (another one is let go before this one is built)
    built = early.pop((config, precision, recompute), None)
    early.clear()
    model, optimizer, train_step = built or build(ns, args, world, backend, config, precision,
                                                  recompute)
    if initial is not None:
        model.load_state_dict(initial)
    entropy = unigram_entropy(data.train, config.vocab_size)
    run = Run(args, out, model, optimizer, tokenizer, loader, val_batches, entropy, start,
              {"train": [], "val": []}, world, signature, train_step, kernels)
    if ckpt:
        restore(run, ckpt)
    if not run.lead:
        return run
    if world.world_size > 1:
        hosts = f"{world.hosts} host{'s' if world.hosts > 1 else ''}"
        print(f"data parallel: {world.world_size} ranks on {hosts}, "
              f"{args.batch_size // world.world_size} sequences each per step"
              + (", AdamW's moments sharded (ZeRO-1)" if sharded(ns, world) else ""))
    print(f"model: {describe(config)}, {model.layout.size:,} parameters, on "
          f"{model.backend.name} in {model.precision}"
          + RECOMPUTED_WORDS[recompute])
    print(f"data: {data.source}, {sum(map(len, data.train)):,} train and "
          f"{sum(map(len, data.val)):,} val tokens ({tokenizer.kind} tokenizer, "
          f"{tokenizer.vocab_size} tokens); unigram entropy {entropy:.3f} nats/token")
    micro = f"{args.grad_accum} micro-batches of " if args.grad_accum > 1 else ""
    print(f"run: {args.steps} steps of {micro}{args.batch_size} x {T} tokens, lr {args.lr:g} "
          f"(warmup {args.warmup}, cosine to {args.lr * args.min_lr_ratio:g}), out {out}",
          flush=True)
    return run


def build(ns, args, world, backend, config, precision, recompute):
    """-> the model (its parameters drawn from args.seed), its optimizer and the training
    step of a micro-batch of this rank's rows."""
    model = GPT(config, backend=backend, seed=args.seed, precision=precision,
                recompute=recompute)
    adamw = adamw_config(args)
    if sharded(ns, world):
        optimizer = ShardedAdamW(model, adamw, world)
        sync = optimizer.sync
    else:
        optimizer, sync = AdamW(model, adamw), world.gradient_sync(model)
    step = Step(model, optimizer, args.batch_size // world.world_size, config.context,
                accum=args.grad_accum, sync=sync,
                graph=os.environ.get("MICROGPT_GRAPH", "1") != "0")
    return model, optimizer, step


def step_shape(config, precision, recompute, args, world):
    """What a step's kernels depend on, in words: the model, precision (and the recompute
    mode, whose kernels write the outputs again: "all" named as before "gelu" was one)
    and micro-batch."""
    mode = {"off": "", "all": " recompute"}.get(recompute, f" recompute {recompute}")
    return (f"{config} {precision}{mode} "
            f"{args.batch_size // world.world_size} x {config.context}")


def sharded(ns, world):
    """Whether the run shards the optimizer (--zero 1 with more than one rank)."""
    return ns.zero == 1 and world.world_size > 1


def start_compiling(ns):
    """Before CUDA starts in this process (a fork after it is unsafe): the processes that
    compile, while the set-up goes on, the kernels that earlier runs' manifests list and
    the cache lacks (a source was edited, numba upgraded), then those of a first run's
    recorded step; or None. One process trains; under mpirun the ranks compile in their
    first step."""
    if ns.device == "cpu" or distributed.launched_by_mpi():
        return None
    processes = os.environ.get("MICROGPT_COMPILE_PROCESSES", "")
    if processes and not (processes.isdigit() and int(processes) > 0):
        raise UserError(f"MICROGPT_COMPILE_PROCESSES={processes}: the number of processes "
                        "that compile kernels ahead, 1 or more (unset: one per CPU)")
    from microgpt.kernels import ahead

    return ahead.start_compiling(Path(ns.cache_dir or default_cache_dir()) / "kernels",
                                 int(processes) if processes else None)


def name_manifest(kernels, shape):
    """Where the kernels that a step of this shape (model, precision, batch) needs are
    listed: the first run of it records them, a later one compiles ahead what the cache
    lacks of them (start_compiling)."""
    name = hashlib.sha256(shape.encode()).hexdigest()[:16]
    kernels.manifest = kernels.directory / "manifests" / f"{name}.pkl"


def adamw_config(args):
    """The optimizer's settings from the run's flags (--grad-clip 0: no clip)."""
    return AdamWConfig(lr=args.lr, warmup_steps=args.warmup, total_steps=args.steps,
                       min_lr_ratio=args.min_lr_ratio, weight_decay=args.weight_decay,
                       beta1=args.beta1, beta2=args.beta2, eps=args.eps,
                       max_norm=args.grad_clip or math.inf)


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
    saved_steps = ckpt.state["args"]["steps"] if ckpt else args.steps
    if saved_steps != args.steps and args.steps <= args.warmup:
        raise UserError(f"--steps {args.steps} would end the run within its warmup "
                        f"({args.warmup} steps); pass a --steps above {args.warmup}")
    if ns.stop_at is not None and not start < ns.stop_at <= args.steps:
        raise UserError(f"--stop-at {ns.stop_at} must lie after step {start} and at most "
                        f"--steps {args.steps}")
    own_run = ckpt.path.parent if ckpt else None
    out = Path(ns.out) if ns.out else (own_run or default_out())
    fresh_name = not ns.out and not ckpt
    check_output_dir(out, own_run, fresh_name)
    if world.rank == 0:
        out = resources.enter_context(RunDirectory(out, own_run, fresh_name))
        if saved_steps != args.steps:
            print(f"note: --steps {args.steps} against the run's {saved_steps}: the cosine "
                  f"schedule now ends at step {args.steps}", file=sys.stderr, flush=True)
    return out


def load_data(args, ckpt, cache_dir, world, backend, requested_precision, zero,
              requested_recompute="auto", before_tokens=lambda config, precision, again: None):
    """-> (TokenData whose tokenizer is set, GPTConfig, the initial parameters of
    --init-from or None, the step's recompute mode: check_memory's). The config, and the
    memory it needs (zero: the moments sharded), are checked before the slow part
    (training a tokenizer, tokenizing), and handed to before_tokens with the precision and
    recompute; its vocabulary can come from the tokenizer."""
    initial = None
    if ckpt:
        tokenizer, config = ckpt.tokenizer, ckpt.config
    elif args.init_from:
        config, initial, tokenizer = imported_model(args)
    else:
        shards = args.data is not None and bool(shard_paths(Path(args.data)))
        tokenizer = planned_tokenizer(args, shards)
        config = model_config(args, tokenizer.vocab_size if tokenizer else DEFAULT_BPE_VOCAB)
    precision = choose_precision(requested_precision, backend, config)
    recompute = check_memory(config, args, world, backend, precision, zero,
                             requested_recompute)
    before_tokens(config, precision, recompute)
    data = load_tokens(args.data, tokenizer, config.tokens, cache_dir)
    data.tokenizer = data.tokenizer or TokenIds(config.tokens)
    if not ckpt and not args.init_from:
        config = model_config(args, data.tokenizer.vocab_size)
    if config.tokens < data.tokenizer.vocab_size:
        raise UserError(f"the tokenizer has {data.tokenizer.vocab_size} tokens but the model's "
                        f"vocabulary is {config.tokens}; pass --vocab-size "
                        f"{data.tokenizer.vocab_size} or more")
    return data, config, initial, recompute


def imported_model(args):
    """--init-from DIR -> (its GPTConfig, its parameters, its tokenizer): the model is the
    directory's (only --context may shorten it), the tokenizer its tokenizer.json or
    --tokenizer FILE."""
    for key in ("config", "n_layer", "d_model", "n_head", "vocab_size"):
        if getattr(args, key) is not None:
            flag = "--" + key.replace("_", "-")
            raise UserError(f"{flag} and --init-from: the model is the directory's; drop "
                            f"{flag} (--context may shorten it)")
    config, params, tokenizer = load_hf_gpt2(args.init_from, args.context)
    if args.tokenizer not in (None, "bpe", "bytes"):
        tokenizer = BPETokenizer.from_file(Path(args.tokenizer))
    elif args.tokenizer is not None or tokenizer is None:
        raise UserError(f"--init-from {args.init_from} " + (
            "has no tokenizer.json; pass --tokenizer FILE, GPT-2's tokenizer.json"
            if tokenizer is None else f"brings its tokenizer: drop --tokenizer {args.tokenizer}"
            " (or pass a tokenizer.json)"))
    return config, params, tokenizer


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
