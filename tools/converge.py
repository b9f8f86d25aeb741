#!/usr/bin/env python3
"""Does microgpt learn as well as PyTorch? Both trainers on the same run, scored alike.

    python tools/converge.py --config andrea-12m --steps 1000 --batch-size 64 --lr 1e-3 \\
        --seeds 0 1 2 --out docs/convergence/andrea-12m-h200
    python tools/converge.py --device cpu --config microgpt --tokenizer bytes \\
        --steps 50 --batch-size 8 --seeds 0 1 --out /tmp/converge-cpu

For each seed, microgpt's training step (microgpt.step.Step, as python -m microgpt.train
runs it) and the PyTorch reference trainer (tools/torch_gpt.py: the same architecture)
train from the same initial parameters (microgpt's init, copied into the PyTorch model
and checked bit for bit), on the same batches in the same order (microgpt.data's
BatchLoader, the trainer's seed), with the same schedule (warmup, then cosine to 0.1x),
AdamW (beta 0.9/0.95, eps 1e-8, weight decay 0.1 on the matrices, the embeddings
included, as microgpt decays them) and global-norm clip at 1.0. On a GPU microgpt runs in
--precision (bf16 by default) and PyTorch in bf16 autocast under torch.compile with fused
AdamW (float32, TF32 off, for --precision fp32); on the CPU, microgpt's NumPy backend
against PyTorch on the CPU, both float32.

One float32 evaluator scores both: microgpt's fp32 model on the same device, loaded with
each trainer's parameters. Every --eval-every steps it scores --curve-windows windows of
the validation split (the curve, its time not counted); at the end, the final parameters
on the whole validation split (every token once, BatchLoader.whole_split).

Each trainer and seed runs in a process of its own, started by this one, so that no
trainer's steps share a process (a pool, a context, resident kernels) with the other's or
with the evaluator's: its wall time runs from the command that started its process (the
interpreter's start, its framework's import, the model's construction, kernel compilation
or loading from the kernel cache, torch.compile) to each step, the number a user feels.
The trainer writes its parameters at each curve point into a working directory, the
clock paused; this process scores them after the trainer has exited. A seed after the
first finds microgpt's kernels in the kernel cache, as a user's second run does. On a GPU
microgpt's trainer starts as microgpt.train does (Run.start_compiling): its kernels
compiled ahead by processes forked before its CUDA starts.
"Time to PyTorch's loss": when microgpt's curve first reaches the final curve loss of
PyTorch's run of the same seed (interpolated between evaluations); and on the mean curves
over the seeds (losses and wall times averaged point by point), when microgpt's reaches
PyTorch's mean final curve loss, against PyTorch's mean wall to its last step.

Writes OUT.md (the table, the machine, the versions and the command), OUT.png (training
loss against steps and against wall time, mean and spread over seeds, the evaluator's
curve, and its mean curves against wall time) and OUT.json (every number, to redraw or
compare): converge_report.py beside it, which rebuilds OUT.md and OUT.png from OUT.json.
"""
import argparse
import importlib.util
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from microgpt.config import CONFIGS, ConfigError, get_config
from microgpt.data import BatchLoader, default_cache_dir, load_tokens, mean_loss
from microgpt.errors import UserError
from microgpt.optim import AdamWConfig, lr_at
from microgpt.tokenizer import ByteTokenizer, BPETokenizer

from converge_report import report, step_ms    # (beside this file, on its path)

PROG = "converge.py"
BPE_VOCAB = 4096        # a BPE tokenizer's size where neither the config nor --vocab-size fix it


# ----------------------------------------------------------------------------------
# the parameters in both layouts

# torch.nn.Linear holds W^T (out, in); microgpt multiplies from the right by W (in, out)
TRANSPOSED = ("attn.w_qkv", "attn.w_o", "mlp.w_fc", "mlp.w_proj")
TORCH_NAMES = {"attn.w_qkv": "w_qkv.weight", "attn.w_o": "w_o.weight",
               "mlp.w_fc": "w_fc.weight", "mlp.w_proj": "w_proj.weight",
               "ln_1.weight": "ln_1.weight", "ln_1.bias": "ln_1.bias",
               "ln_2.weight": "ln_2.weight", "ln_2.bias": "ln_2.bias"}


def torch_name(name):
    """microgpt's parameter name -> the PyTorch model's (wte.weight, h.0.w_qkv.weight, ...)."""
    if name in ("wte", "wpe"):
        return name + ".weight"
    if name.startswith("h."):
        _, layer, rest = name.split(".", 2)
        return f"h.{layer}.{TORCH_NAMES[rest]}"
    return name


def to_torch_state(state):
    """microgpt's state_dict -> the PyTorch model's, as host float32 arrays."""
    return {torch_name(name): np.ascontiguousarray(value.T if name.endswith(TRANSPOSED)
                                                   else value)
            for name, value in state.items()}


def from_torch_model(tmodel, names):
    """The PyTorch model's parameters -> microgpt's state_dict (host float32 arrays)."""
    theirs = {k: v.detach().float().cpu().numpy() for k, v in tmodel.state_dict().items()}
    return {name: np.ascontiguousarray(theirs[torch_name(name)].T if name.endswith(TRANSPOSED)
                                       else theirs[torch_name(name)])
            for name in names}


def load_into_torch(tmodel, state):
    """Copy microgpt's state_dict into the PyTorch model, then check it reads back bit for
    bit (a transposed or misnamed tensor would fail here, not as a worse loss)."""
    import torch

    with torch.no_grad():
        for name, value in to_torch_state(state).items():
            tmodel.get_parameter(name).copy_(torch.from_numpy(value))
    check_holds(tmodel, state)


def check_holds(tmodel, state):
    """The PyTorch model's parameters are state's, bit for bit."""
    back = from_torch_model(tmodel, state)
    for name, value in state.items():
        if not np.array_equal(back[name].view(np.uint32), value.view(np.uint32)):
            raise AssertionError(f"{name}: the PyTorch model does not hold microgpt's "
                                 "parameters")


# ----------------------------------------------------------------------------------
# the two trainers, each in a process of its own


class Clock:
    """Seconds since the command that started this process (time.time(), the one clock two
    processes share), less the pauses: the snapshots a trainer writes for the evaluator."""

    def __init__(self, started_at):
        self.paused, self.t0 = 0.0, started_at

    def now(self):
        return time.time() - self.t0 - self.paused

    def pause(self):
        return _Pause(self)


class _Pause:
    def __init__(self, clock):
        self.clock = clock

    def __enter__(self):
        self.t = time.time()

    def __exit__(self, *exc):
        self.clock.paused += time.time() - self.t


def train_microgpt(run, seed, clock, work):
    """-> record of one seed: the training loss of every step, the wall time at each log
    point, and the curve points' parameters in work (init-SEED.npz too, for PyTorch)."""
    from microgpt import GPT
    from microgpt.optim import AdamW
    from microgpt.step import Step

    compilers, manifest = run.start_compiling()
    model = GPT(run.config, backend=run.make_backend(), seed=seed, precision=run.precision)
    with clock.pause():
        np.savez(work / f"init-{seed}.npz", **model.state_dict())
    optimizer = AdamW(model, run.adamw)
    step = Step(model, optimizer, run.B, run.config.context)
    if compilers is not None:
        from microgpt.kernels import ahead

        if not ahead.manifest_jobs(manifest):
            compilers.hand(ahead.record(step.accumulate, step.update))
        compilers.wait(manifest)
    loader = run.loader(seed)
    record = Record("microgpt", seed)
    for n in range(1, run.steps + 1):
        step.run(*loader.next_batch())
        if n == 1 and compilers is not None:
            ahead.write_manifest(manifest)
        if not run.reads_at(n):
            continue
        record.log(n, clock.now(), step.metrics()["loss"])     # waits for the device
        if run.evaluates_at(n):
            with clock.pause():
                record.snapshot(n, clock.now(), model.state_dict(), work)
    return record


def train_torch(run, seed, clock, work):
    import torch
    from torch_gpt import torch_gpt

    device = run.device
    if device == "cuda":        # float32 is float32 (the evaluator's, microgpt's fp32)
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    tmodel = torch_gpt(run.config, device)
    with clock.pause():         # microgpt's init in place of PyTorch's own: not its cost
        with np.load(work / f"init-{seed}.npz") as saved:
            init = dict(saved)
        load_into_torch(tmodel, init)
    forward = torch.compile(tmodel) if run.torch_compile else tmodel
    decay = [p for p in tmodel.parameters() if p.dim() == 2]
    no_decay = [p for p in tmodel.parameters() if p.dim() != 2]
    cfg = run.adamw
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": cfg.weight_decay},
         {"params": no_decay, "weight_decay": 0.0}],
        lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), eps=cfg.eps, fused=device == "cuda")
    bf16 = run.precision == "bf16"
    loader = run.loader(seed)
    record = Record("pytorch", seed)
    pending = []
    for n in range(1, run.steps + 1):
        inputs, targets = (torch.from_numpy(a).long().to(device) for a in loader.next_batch())
        for group in optimizer.param_groups:
            group["lr"] = lr_at(n - 1, cfg)
        with torch.autocast(device, dtype=torch.bfloat16, enabled=bf16):
            loss = forward(inputs, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(tmodel.parameters(), cfg.max_norm)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        pending.append(loss.detach())
        if not run.reads_at(n):
            continue
        record.log(n, clock.now(), torch.stack(pending).float().cpu().numpy())   # waits
        pending = []
        if run.evaluates_at(n):
            with clock.pause():
                record.snapshot(n, clock.now(), from_torch_model(tmodel, init), work)
    return record


TRAINERS = {"microgpt": train_microgpt, "pytorch": train_torch}


def train_one(args):
    """The trainer's process (--trainer): one seed, its record written to WORK as JSON."""
    clock = Clock(args.started_at)
    run, work, (seed,) = Run(args), Path(args.work), args.seeds
    record = TRAINERS[args.trainer](run, seed, clock, work)
    record.path(work).write_text(json.dumps(record.as_dict()))
    return 0


class TrainerFailed(Exception):
    """A trainer's process ended badly; it has said why on its stderr."""


def spawn(trainer, seed, argv, work):
    """Runs one trainer on one seed in a process of its own -> its record (curve points not
    yet scored). Its wall clock starts here, before the interpreter does."""
    sys.stdout.flush()
    command = [sys.executable, str(Path(__file__).resolve()), *argv, "--trainer", trainer,
               "--seeds", str(seed), "--work", str(work), "--started-at", repr(time.time())]
    status = subprocess.run(command).returncode
    if status:
        raise TrainerFailed(f"the {trainer} trainer of seed {seed} exited with status "
                            f"{status} (its output is above)")
    return Record.load(Record(trainer, seed).path(work))


class Record:
    def __init__(self, trainer, seed):
        self.trainer, self.seed = trainer, seed
        self.losses, self.times = [], []     # per step; times at log points only
        self.curve = []                       # (step, wall s, evaluator's curve loss)
        self.final = None

    def log(self, step, now, losses):
        self.losses += [float(x) for x in losses]
        self.times.append((step, now))

    def snapshot(self, step, now, state, work):
        """A curve point: its parameters into work, for the evaluator to score."""
        np.savez(self._snapshot_path(work, step), **state)
        self.curve.append((step, now, None))

    def _snapshot_path(self, work, step):
        return Path(work) / f"{self.trainer}-{self.seed}-{step}.npz"

    def path(self, work):
        return Path(work) / f"{self.trainer}-{self.seed}.json"

    def score(self, evaluator, work):
        """The curve's points by the evaluator, the last on the whole split too; the
        snapshots deleted as they are read."""
        for i, (step, now, _) in enumerate(self.curve):
            path = self._snapshot_path(work, step)
            with np.load(path) as snapshot:
                state = dict(snapshot)
            path.unlink()
            self.curve[i] = (step, now, evaluator.curve(state))
        self.final = evaluator.whole(state)

    def as_dict(self):
        return dict(trainer=self.trainer, seed=self.seed, losses=self.losses,
                    times=self.times, curve=self.curve, final=self.final)

    @classmethod
    def load(cls, path):
        d = json.loads(Path(path).read_text())
        record = cls(d["trainer"], d["seed"])
        record.losses, record.times, record.curve, record.final = (
            d["losses"], [tuple(t) for t in d["times"]], [tuple(c) for c in d["curve"]],
            d["final"])
        return record


class Evaluator:
    """One float32 model on the run's device that scores either trainer's parameters."""

    def __init__(self, run):
        from microgpt import GPT

        self.model = GPT(run.config, backend=run.make_backend(), precision="fp32")
        loader = BatchLoader(run.data.val, run.B, run.config.context, run.config.vocab_size,
                             0, split="validation")
        self.batches = loader.whole_split()
        windows = np.concatenate([x for x, _ in self.batches])
        targets = np.concatenate([y for _, y in self.batches])
        # the curve's windows: spread over the split, in batches of B
        pick = np.linspace(0, len(windows) - 1, min(run.curve_windows, len(windows))).astype(int)
        self.curve_batches = [(windows[pick[i:i + run.B]], targets[pick[i:i + run.B]])
                              for i in range(0, len(pick), run.B)]
        self.windows = len(windows)

    def _score(self, state, batches):
        self.model.load_state_dict(state)
        return mean_loss(batches, self.model.evaluate)

    def curve(self, state):
        return self._score(state, self.curve_batches)

    def whole(self, state):
        return self._score(state, self.batches)


# ----------------------------------------------------------------------------------
# the run


class Run:
    """What both trainers share: the model, the data, the schedule, the device."""

    def __init__(self, args):
        self.device, self.deterministic = args.device, args.deterministic
        cuda = args.device == "cuda"
        tokenizer = (None if args.tokenizer in (None, "bpe") else ByteTokenizer()
                     if args.tokenizer == "bytes"
                     else BPETokenizer.from_file(Path(args.tokenizer)))
        vocab = args.vocab_size or CONFIGS[args.config]["vocab_size"]
        self.cache_dir = Path(args.cache_dir or default_cache_dir())
        data = load_tokens(args.data, tokenizer, vocab or BPE_VOCAB, self.cache_dir)
        vocab = vocab or data.tokenizer.vocab_size
        overrides = {k: getattr(args, k) for k in ("n_layer", "d_model", "n_head", "context")}
        self.config = get_config(args.config, vocab_size=vocab, **overrides)
        self.data, self.source = data, data.source
        self.precision = args.precision or ("bf16" if cuda else "fp32")
        if self.precision == "bf16" and not cuda:
            raise UserError("--precision bf16 needs --device cuda; on the CPU both trainers "
                            "run float32")
        self.torch_compile = cuda and not args.no_torch_compile
        self.B, self.steps, self.seeds = args.batch_size, args.steps, args.seeds
        self.log_every, self.eval_every = args.log_every, args.eval_every
        self.curve_windows = args.curve_windows
        warmup = args.warmup if args.warmup is not None else max(1, args.steps // 20)
        self.adamw = AdamWConfig(lr=args.lr, warmup_steps=warmup, total_steps=args.steps)

    def start_compiling(self):
        """The trainer's start-up on a GPU (microgpt.run's): processes forked before CUDA
        starts here that compile the step's kernels into the cache at once, as its first
        run records them or as the manifest of an earlier one lists them -> (Compilers,
        the manifest's path), or (None, None) on the CPU."""
        if self.device != "cuda":
            return None, None
        import hashlib

        from microgpt.kernels import ahead

        directory = self.cache_dir / "kernels"
        shape = f"converge {self.config} {self.precision} {self.deterministic} {self.B}"
        name = hashlib.sha256(shape.encode()).hexdigest()[:16]
        return ahead.start_compiling(directory), directory / "manifests" / f"{name}.pkl"

    def make_backend(self):
        """microgpt's backend (the trainer's, the evaluator's): the PyTorch trainer's
        process makes none, so it holds no context of numba's."""
        from microgpt.cli import make_backend

        backend = make_backend(self.device, self.deterministic)
        if backend.name == "cuda":      # the trainer's compiled kernels, where it keeps them
            from microgpt.kernels import cache as kernel_cache
            kernel_cache.use(self.cache_dir / "kernels")
        return backend

    def evaluates_at(self, n):
        """The evaluator's curve gets a point after step n."""
        return n == self.steps or bool(self.eval_every) and n % self.eval_every == 0

    def reads_at(self, n):
        """The trainer reads its losses back (and the clock) after step n: the first step's
        time is the start-up's."""
        return n == 1 or n % self.log_every == 0 or self.evaluates_at(n)

    def loader(self, seed):
        return BatchLoader(self.data.train, self.B, self.config.context,
                           self.config.vocab_size, seed)


def run_seeds(run, argv, seed_done):
    """Both trainers for every seed, microgpt first (PyTorch starts from its init), each
    in a process of its own and scored after it has exited; seed_done(records, extra)
    after each seed (the report so far: a run cut short keeps its finished seeds)."""
    evaluator = Evaluator(run)
    records = []
    with tempfile.TemporaryDirectory(prefix="converge-") as work:
        for seed in run.seeds:
            for trainer in TRAINERS:
                record = spawn(trainer, seed, argv, work)
                record.score(evaluator, work)
                print(f"  seed {seed} {trainer:8s} final whole-split val {record.final:.4f}  "
                      f"train {record.losses[-1]:.4f}  step 1 at {record.times[0][1]:.1f} s, "
                      f"{step_ms(record):.2f} ms a step, {record.times[-1][1]:.1f} s",
                      flush=True)
                records.append(record)
            (Path(work) / f"init-{seed}.npz").unlink()
            seed_done(records, dict(windows=evaluator.windows))




def parse_args(argv):
    p = argparse.ArgumentParser(prog=PROG, description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", default="andrea-12m", choices=list(CONFIGS))
    for field in ("n_layer", "d_model", "n_head", "context", "vocab_size"):
        p.add_argument("--" + field.replace("_", "-"), type=int, metavar="N",
                       help=f"override the config's {field}")
    p.add_argument("--data", help="as the trainer's --data (default: the Python standard library)")
    p.add_argument("--tokenizer", help="bpe, bytes or a tokenizer.json (default: bpe at the "
                   "vocabulary size, 4096 unless --vocab-size)")
    p.add_argument("--cache-dir", help="the trainer's token and kernel cache (default: its "
                   "default)")
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    p.add_argument("--precision", choices=["bf16", "fp32"],
                   help="microgpt's; PyTorch's follows (default: bf16 on cuda, fp32 on cpu)")
    p.add_argument("--deterministic", action="store_true",
                   help="microgpt's split-K added in a fixed order and its embedding "
                   "backward sorted: the same bits every run, as the trainer's "
                   "--deterministic")
    p.add_argument("--no-torch-compile", action="store_true",
                   help="PyTorch eager on the GPU (default: torch.compile)")
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--warmup", type=int, help="default: 5%% of --steps, as the trainer's")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--log-every", type=int, default=10,
                   help="steps between the wall-clock readings (each waits for the device)")
    p.add_argument("--eval-every", type=int, default=100,
                   help="steps between the evaluator's curve points; 0: at the end only")
    p.add_argument("--curve-windows", type=int, default=64,
                   help="validation windows of a curve point (default: 64)")
    p.add_argument("--out", required=True, help="writes OUT.md, OUT.png and OUT.json")
    # the trainer's process, as this one starts it (spawn): which trainer, where its
    # record and snapshots go, and when the command that started it ran
    p.add_argument("--trainer", choices=list(TRAINERS), help=argparse.SUPPRESS)
    p.add_argument("--work", help=argparse.SUPPRESS)
    p.add_argument("--started-at", type=float, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    for name in ("steps", "batch_size", "log_every", "curve_windows"):
        if getattr(args, name) <= 0:
            p.error(f"--{name.replace('_', '-')} must be positive")
    if args.log_every > 1024:
        p.error("--log-every must be at most 1024 (microgpt's step log holds 1024 steps)")
    if args.warmup is not None and not 0 <= args.warmup <= args.steps:
        p.error("--warmup must lie in [0, --steps]")
    return args


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    if args.trainer:
        return train_one(args)
    out = Path(args.out)
    if not out.parent.is_dir():
        print(f"{PROG}: --out {args.out}: the directory {out.parent} does not exist; create "
              "it or pass another --out", file=sys.stderr)
        return 2
    if importlib.util.find_spec("torch") is None:   # imported by its trainer's process only
        print(f"{PROG}: PyTorch is not installed; install it (pip install \".[bench]\") to "
              "compare against it", file=sys.stderr)
        return 2
    command = "python tools/converge.py " + " ".join(argv)
    try:
        run = Run(args)
        run_seeds(run, argv, lambda records, extra: report(run, records, extra, command, out))
    except (UserError, ConfigError) as err:
        print(f"{PROG}: {err}", file=sys.stderr)
        return 2
    except TrainerFailed as err:
        print(f"{PROG}: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
