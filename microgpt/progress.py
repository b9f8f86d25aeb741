"""What a run shows while it trains (the log lines, the live line between them) and how it
is stopped (Ctrl-C or SIGTERM: after the current step, with a checkpoint)."""
import math
import signal
import sys
import threading
import time

import numpy as np

from microgpt.cli import Terminated


class StopRequest:
    """Ctrl-C or SIGTERM (what timeout, Slurm and Kubernetes send) during training asks the
    loop to stop after the current step, so the checkpoint it saves is a consistent one; a
    second signal quits at once. signum: the signal that asked, or None."""
    NAMES = {signal.SIGINT: "Ctrl-C", signal.SIGTERM: "SIGTERM"}

    def __init__(self, progress):
        self.progress = progress        # whose live line a message clears first

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
        self.progress.clear()
        print(f"{name}: stopping after this step to save a checkpoint ({name} again stops "
              "at once, keeping the last complete checkpoint)", file=sys.stderr, flush=True)

    @property
    def name(self):
        return self.NAMES.get(self.signum, "a signal")

    def __exit__(self, *exc):
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)


class Progress:
    """Log lines on stdout; on a terminal, also a live line on stderr between them, redrawn
    as the host enqueues each step (at most REDRAW_S apart): the step, the last loss read
    back and the ETA at the last measured rate. A silent one (the data-parallel ranks but
    the first) only keeps the step times. With metrics (a MetricsLog) every log line is
    also a record there; utilisation (a metrics.Utilisation) adds the MFU."""
    REDRAW_S = 0.1

    def __init__(self, total_steps, silent=False, metrics=None, utilisation=None):
        self.total = total_steps
        self.silent = silent
        self.metrics, self.utilisation = metrics, utilisation
        self.live = sys.stderr.isatty() and not silent
        self.step_times = []          # seconds per step since the last log line
        self.last = None              # (loss, seconds) of the last step read back
        self.drawn_at = -math.inf

    def step(self, step, loss, seconds):
        """A step read back: its loss, and its share of the interval's wall time."""
        self.step_times.append(seconds)
        self.last = loss, seconds

    def enqueued(self, step):
        """The host has enqueued step: redraw the live line."""
        now = time.monotonic()
        if not self.live or now - self.drawn_at < self.REDRAW_S:
            return
        self.drawn_at = now
        line = f"\rstep {step}/{self.total}"
        if self.last is not None:
            loss, seconds = self.last
            line += (f" | loss {loss:.4f} | {seconds * 1e3:.0f} ms/step | eta "
                     f"{format_duration((self.total - step) * seconds)}")
        sys.stderr.write(line + "\033[K")
        sys.stderr.flush()

    def clear(self):
        """Erase the live line, so the next line written starts at the margin."""
        if self.live:
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()
            self.drawn_at = -math.inf

    def log(self, line):
        if self.silent:
            return
        self.clear()
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


class KernelProgress:
    """What the first step waits for: its kernels, each compiled or loaded from the disk
    cache (microgpt.kernels.cache calls this as each is ready). On a terminal a live line
    names the kernel; in a log, a line every LOG_EVERY seconds while kernels keep coming."""
    LOG_EVERY = 10.0

    def __init__(self, directory, silent=False):
        self.directory, self.silent = directory, silent
        self.manifest = None        # where the kernels of this run's step are listed
        self.counts = {"compiled": 0, "cache": 0}
        self.live = sys.stderr.isatty() and not silent
        self.started = self._logged = time.perf_counter()

    def __call__(self, name, how, seconds):
        self.counts[how] += 1
        if self.silent:
            return
        if self.live:
            sys.stderr.write(f"\r\033[Kkernels: {self._tally()} | {name}")
            sys.stderr.flush()
        elif time.perf_counter() - self._logged > self.LOG_EVERY:
            self._logged = time.perf_counter()
            print(f"kernels: {self._tally()} so far, {format_duration(self.elapsed)}", flush=True)

    @property
    def elapsed(self):
        return time.perf_counter() - self.started

    def _tally(self):
        return (f"{sum(self.counts.values())} ready ({self.counts['compiled']} compiled, "
                f"{self.counts['cache']} from the cache)")

    def record(self):
        """List the kernels this run has used in its manifest, for a later run that finds
        the cache without them to compile ahead (microgpt.run.start_compiling)."""
        if self.manifest is not None and not self.silent:
            from microgpt.kernels import ahead
            ahead.write_manifest(self.manifest)

    def summary(self):
        """The line after the first step: how many kernels, how made, in how long."""
        if self.live:
            sys.stderr.write("\r\033[K")
        return (f"kernels: {self._tally()} in {self.elapsed:.1f} s; the cache is "
                f"{self.directory}")


def format_duration(seconds):
    minutes, seconds = divmod(int(round(seconds)), 60)
    return f"{minutes}m{seconds:02d}s" if minutes else f"{seconds}s"
