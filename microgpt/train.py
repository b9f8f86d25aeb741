"""Train a GPT: ``python -m microgpt.train [options]`` (docs/training.md).

With no arguments it trains, on the CPU, a small member of the microgpt family on the
Python standard library's own source: long enough to learn visibly, short enough (under
four minutes on two cores, tokenizer included) to watch to the end. The trainer drives the
model through its public API only, so it runs unchanged on any backend.

The parts of a run live beside this loop: its flags (train_args), its directory and lock
(run_dir), the ranks' agreement (ranks), the memory check (memory), the setup (run) and
what it shows while it trains (progress).
"""
import contextlib
import dataclasses
import math
import sys
import time
import warnings

import numpy as np

from microgpt import distributed
from microgpt.checkpoint import LATEST, atomic_file, find_checkpoint, save_checkpoint
from microgpt.cli import (EXIT_INTERRUPTED, EXIT_USER_ERROR, Terminated, backend_for,
                          exit_status, make_backend, run_cli)
from microgpt.config import ConfigError
from microgpt.data import mean_loss
from microgpt.errors import BackendError, UserError
from microgpt.metrics import METRICS, MetricsLog, Utilisation, plot_losses, read_metrics
from microgpt.progress import Progress, StopRequest, format_duration
from microgpt.ranks import on_every_rank
from microgpt.run import setup, start_compiling
from microgpt.sample import sample_text
from microgpt.step import LOG_ROWS
from microgpt.train_args import PROG, parse_args

EXIT_DIVERGED = 1
# A loss this many times a uniform guess's (ln V; a fresh model starts near 1x) means the
# run diverged. Measured on the microgpt config (docs/training.md): runs that peaked below
# 20x came back to a normal loss, the ones past 100x never did (or only to NaN).
DIVERGED_LOSS_RATIO = 100.0
SAMPLE_TOKENS = 120          # per sample printed during training
FINAL_SAMPLES = 2            # written to samples.txt at the end, FINAL_SAMPLE_TOKENS each
FINAL_SAMPLE_TOKENS = 200


def train(run, stop_at):
    """Run the loop to args.steps (or stop_at, or a signal) -> exit status."""
    model, world = run.model, run.world
    utilisation = Utilisation(model.config, model.backend, world.world_size,
                              model.precision)
    progress = Progress(run.args.steps, silent=not run.lead, utilisation=utilisation,
                        metrics=MetricsLog(run.out, run.step) if run.lead else None)
    if run.lead and utilisation.peak:
        progress.log(f"mfu: {format_flops(utilisation.flops_per_token)} per token over the "
                     f"{model.precision} peak of {world.world_size} x {utilisation.device}, "
                     f"{utilisation.peak / world.world_size / 1e12:g} TFLOP/s each")
    if run.lead and run.kernels:
        progress.log(f"kernels: compiling, or loading from the cache in {run.kernels.directory} "
                     "...")
    # overflow on the way to a divergence is reported once, by healthy(), not op by op
    with StopRequest(progress) as stop, np.errstate(all="ignore"):
        try:
            return loop(run, progress, stop, stop_at)
        except (KeyboardInterrupt, Terminated):
            if not stop.requested:
                raise
            # the second signal: no step is finished, and the checkpoint being written (if
            # any) is left unnamed by `latest`, which still names a complete one
            progress.clear()
            if run.lead:
                print(f"{PROG}: {stop.name} again: stopped at once after step {run.step}; "
                      f"{kept_checkpoint(run)}", file=sys.stderr, flush=True)
            return exit_status(stop.signum)


def loop(run, progress, stop, stop_at):
    """The steps from run.step to args.steps (or stop_at, or stop) -> exit status."""
    args, model, world = run.args, run.model, run.world
    started = time.perf_counter()
    first_step = run.step
    read_at = time.perf_counter()
    kernels_told = not run.lead
    while run.step < args.steps:
        run.train_step.run(*run.next_batch())
        run.step += 1
        progress.enqueued(run.step)
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
        if run.kernels and not kernels_told:    # the first read back: they are ready
            kernels_told = True
            progress.log(run.kernels.summary())
            run.kernels.record()
        if due_log or val is not None:
            progress.log_step(run.step, loss, val, lr, norm, run.tokens_per_step)
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


def kept_checkpoint(run):
    """What a run stopped at once leaves to continue from, in words."""
    latest = run.out / LATEST
    if not latest.is_file():
        return "no checkpoint had been written: start the run again"
    return (f"its last complete checkpoint, {run.out / latest.read_text().strip()}, is kept: "
            f"continue with python -m microgpt.train --resume {run.out}")


def format_flops(flops):
    """A count of FLOPs in the unit that shows three digits: 2.07 MFLOP, 1.02 GFLOP."""
    for unit, scale in (("TFLOP", 1e12), ("GFLOP", 1e9), ("MFLOP", 1e6), ("kFLOP", 1e3)):
        if flops >= scale:
            return f"{flops / scale:.3g} {unit}"
    return f"{flops:.3g} FLOP"


def evaluate(run, batches=None):
    """Mean loss per token over the validation batches (or batches), each rank taking its
    rows: of the whole split's short last batch, the ones it has, maybe none. The world's
    mean of the ranks' sums over its mean of their rows is the mean over all rows."""
    mine = [(x[run.rows], y[run.rows]) for x, y in (batches or run.val_batches)]
    mine = [(x, y) for x, y in mine if len(x)]
    rows = sum(len(x) for x, _ in mine)
    total = mean_loss(mine, run.train_step.evaluate) * rows if rows else 0.0
    return run.world.mean(total) / run.world.mean(float(rows))


def save(run, progress, val):
    """Checkpoint the parameters the last step left, if their loss is healthy (val, else the
    loss on the first validation batch) -> None, or what kept them from being written."""
    if val is None:
        val = evaluate(run, run.val_batches[:1])
    if not healthy(val, run.model.config):
        return f"the parameters after step {run.step} have a loss of {val:.4g}"
    # on every rank: under ZeRO-1 each sends its shard of the moments to rank 0
    optimizer_state = run.optimizer.state_dict()
    on_every_rank(run.world, lambda: write_checkpoint(run, progress, optimizer_state)
                  if run.lead else None)
    return None


def write_checkpoint(run, progress, optimizer_state):
    state = {"step": run.step, "loader": run.loader.state_dict(),
             "args": dataclasses.asdict(run.args), "history": run.history,
             "data_signature": run.data_signature}
    path = save_checkpoint(run.out, run.model, optimizer_state, run.tokenizer, state)
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


# ----------------------------------------------------------------------------------

def run_training(argv):
    ns = parse_args(argv)
    compilers = start_compiling(ns)     # forks: before anything here starts CUDA
    # under mpirun this also picks the rank's GPU, before the backend allocates anything;
    # a device that cannot run here fails now, before any data work
    world = distributed.init(backend_for(ns.device))
    try:
        with contextlib.ExitStack() as resources, warnings.catch_warnings():
            if compilers is not None:
                resources.callback(compilers.stop)
            # numba's advice for small launches (the microgpt config's) is not the user's
            warnings.filterwarnings("ignore", message=r"(?s).*Grid size \d+ will likely "
                                    "result in GPU under-utilization")
            backend = make_backend(ns.device, ns.deterministic)
            run = setup(ns, world, backend, resources, compilers)
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
