"""The run directory: checked before any work, created if missing, and locked while the
run lasts."""
import contextlib
import fcntl
import os
import time
from pathlib import Path

from microgpt.checkpoint import LATEST, remove_stale_temporaries
from microgpt.errors import UserError, file_kind
from microgpt.metrics import METRICS


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


def default_out():
    """runs/DATE-TIME, the run directory when --out is not given."""
    return Path("runs") / time.strftime("%Y%m%d-%H%M%S")
