"""The errors a user can fix: argument types that reject them, and how the CLIs report them.

Bad input (a missing path, a corpus that is not text, a corrupt checkpoint ...) raises
UserError with one line that says what is wrong and what to do. The CLIs print that line
on stderr and exit with status 2: no traceback, since nothing in the program is broken.
"""
import argparse
import sys

from microgpt.backend import BackendError
from microgpt.config import ConfigError

EXIT_USER_ERROR = 2
EXIT_INTERRUPTED = 130      # 128 + SIGINT, the shell's convention for Ctrl-C


class UserError(Exception):
    """Bad input; the message is one line for the user."""


def run_cli(program, run, argv):
    """Call run(argv) -> exit status; user errors become one line on stderr and status 2,
    Ctrl-C outside the training loop (which handles its own) becomes status 130."""
    try:
        return run(argv)
    except (UserError, ConfigError, BackendError) as err:
        print(f"{program}: error: {err}", file=sys.stderr)
        return EXIT_USER_ERROR
    except KeyboardInterrupt:
        print(f"{program}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


class ArgumentParser(argparse.ArgumentParser):
    """argparse that reports a bad argument in one line (no usage block) with status 2."""

    def error(self, message):
        self.exit(EXIT_USER_ERROR, f"{self.prog}: error: {message}; see --help\n")


def positive_int(text):
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return value


def positive_float(text):
    value = float(text)
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text}")
    return value


def non_negative(kind):
    """An argparse type: kind(text), refusing negatives."""
    def parse(text):
        value = kind(text)
        if value < 0:
            raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
        return value
    parse.__name__ = f"non-negative {kind.__name__}"
    return parse
