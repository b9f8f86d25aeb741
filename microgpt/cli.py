"""The command lines' plumbing: argument types, the --device choice, exit statuses, and how
the CLIs report what a user can fix.

Bad input (a missing path, a corpus that is not text, a corrupt checkpoint ...) raises
UserError (microgpt.errors) with one line that says what is wrong and what to do. The CLIs
print that line on stderr and exit with status 2: no traceback, since nothing in the
program is broken.

The CLIs also outlive their reader: after a broken pipe (``| head``) output is dropped
and the work goes on, and SIGTERM (what timeout, Slurm and Kubernetes send) unwinds the
program like Ctrl-C, so temporary files are removed on the way out.
"""
import argparse
import math
import os
import signal
import sys
import threading
from contextlib import contextmanager

from microgpt.backend import cuda_available, get_backend
from microgpt.config import ConfigError
from microgpt.errors import BackendError, UserError

EXIT_USER_ERROR = 2


def exit_status(signum):
    """The shell's convention for a program stopped by a signal: 130 for Ctrl-C, 143 for
    SIGTERM."""
    return 128 + signum


EXIT_INTERRUPTED = exit_status(signal.SIGINT)


class Terminated(BaseException):
    """SIGTERM outside the training loop (which handles its own); a BaseException, like
    KeyboardInterrupt, so that no `except Exception` swallows it."""


def run_cli(program, run, argv):
    """Call run(argv) -> exit status; user errors become one line on stderr and status 2,
    Ctrl-C and SIGTERM outside the training loop become status 130 and 143."""
    with _streams_that_outlive_their_reader(), _sigterm_unwinds():
        try:
            return run(argv)
        except (UserError, ConfigError, BackendError) as err:
            print(f"{program}: error: {err}", file=sys.stderr)
            return EXIT_USER_ERROR
        except MemoryError:
            print(f"{program}: error: out of memory; pass a smaller --batch-size or a "
                  "smaller model", file=sys.stderr)
            return EXIT_USER_ERROR
        except KeyboardInterrupt:
            print(f"{program}: interrupted", file=sys.stderr)
            return EXIT_INTERRUPTED
        except Terminated:
            print(f"{program}: terminated", file=sys.stderr)
            return exit_status(signal.SIGTERM)


@contextmanager
def _sigterm_unwinds():
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handle(signum, frame):
        raise Terminated
    previous = signal.signal(signal.SIGTERM, handle)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextmanager
def _streams_that_outlive_their_reader():
    for fd in (1, 2):
        try:
            os.fstat(fd)
        except OSError:
            # closed at start (`>&-`): hold the number with /dev/null, or the next file
            # opened would take it and receive whatever a library prints there
            devnull = os.open(os.devnull, os.O_WRONLY)
            if devnull != fd:
                os.dup2(devnull, fd)
                os.close(devnull)
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = Output(sys.stdout), Output(sys.stderr)
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved


class Output:
    """A text stream that a closed reader cannot break: after a broken pipe (``| head``)
    every write is dropped, and text the stream cannot encode (a file name that is not
    UTF-8) is written with backslash escapes instead of raising."""

    def __init__(self, stream):
        self._stream = stream
        self.lost = stream is None        # Python sets None for a stream closed at start

    def write(self, text):
        if not self.lost:
            try:
                self._stream.write(text)
            except UnicodeEncodeError:
                encoding = getattr(self._stream, "encoding", None) or "utf-8"
                self._guard(self._stream.write,
                            text.encode(encoding, "backslashreplace").decode(encoding))
            except BrokenPipeError:
                self._lose()
        return len(text)

    def flush(self):
        if not self.lost:
            self._guard(self._stream.flush)

    def isatty(self):
        return not self.lost and self._stream.isatty()

    def __getattr__(self, name):
        return getattr(self._stream, name)

    def _guard(self, call, *args):
        try:
            call(*args)
        except BrokenPipeError:
            self._lose()

    def _lose(self):
        """Point the descriptor at /dev/null, so the interpreter's last flush of the
        buffered text finds a reader and exits quietly."""
        self.lost = True
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self._stream.fileno())
            os.close(devnull)
        except (OSError, ValueError, AttributeError):   # an in-memory stream has no fileno
            pass


class ArgumentParser(argparse.ArgumentParser):
    """argparse that reports a bad argument in one line (no usage block) with status 2,
    and takes flags by their whole names only (an abbreviation, --ste for --steps, would
    change meaning the day a flag that shares its start is added)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, allow_abbrev=False, **kwargs)

    def error(self, message):
        self.exit(EXIT_USER_ERROR, f"{self.prog}: error: {message}; see --help\n")


def number_in(kind, low, high, *, low_open=False, high_open=True, what):
    """An argparse type: kind(text) in the interval from low to high (open at an end where
    asked; NaN never passes), else the one-line message "must be WHAT, got TEXT"."""
    def parse(text):
        try:
            value = kind(text)
        except ValueError:
            value = None
        if value is None or not ((low < value) if low_open else (low <= value)) or not (
                (value < high) if high_open else (value <= high)):
            raise argparse.ArgumentTypeError(f"must be {what}, got {text}")
        return value
    parse.__name__ = what
    return parse


positive_int = number_in(int, 0, math.inf, low_open=True, what="a positive integer")
positive_float = number_in(float, 0, math.inf, low_open=True, what="a positive number")


def non_negative(kind):
    """An argparse type: kind(text), refusing negatives, NaN and infinity."""
    return number_in(kind, 0, math.inf, what="an integer >= 0" if kind is int
                     else "a finite number >= 0")


DEVICES = ("auto", "cpu", "cuda")


def backend_for(device):
    """--device -> the model's backend name: cpu is numpy, auto takes a GPU when numba sees one."""
    if device == "auto":
        return "cuda" if cuda_available() else "numpy"
    return {"cpu": "numpy", "cuda": "cuda"}[device]


def make_backend(device, deterministic=False):
    """--device (and --deterministic) -> the backend to run on; one that cannot run here is
    a UserError."""
    try:
        return get_backend(backend_for(device), deterministic=deterministic)
    except BackendError as err:
        raise UserError(f"--device {device}: {err}") from None
    except ImportError as err:
        raise UserError(f"--device {device}: the cuda backend is not available ({err}); "
                        "use --device cpu") from None


def choose_precision(requested, backend, config):
    """--precision for a model config: as given (bf16 refused, in one line, where it cannot
    run), else bf16 where the backend has bf16 tensor cores (a GPU of compute capability
    8.0 or later) and they take the model, else fp32 (the CPU, the CUDA simulator)."""
    if requested == "bf16":
        if backend.name != "cuda":
            raise UserError("--precision bf16 needs the cuda backend (the tensor cores); "
                            "pass --precision fp32, or --device cuda on a GPU")
        if not backend.bf16_fits(config.head_dim):
            raise UserError(f"--precision bf16: head_dim {config.head_dim} is wider than "
                            "flash attention's tiles (at most 128); pass --precision fp32, or "
                            "more --n-head")
    if requested:
        return requested
    return ("bf16" if getattr(backend, "bf16_tensor_cores", False)
            and backend.bf16_fits(config.head_dim) else "fp32")
