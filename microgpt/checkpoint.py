"""Checkpoints: one directory per save, written atomically, and a `latest` pointer.

    RUN_DIR/
      ckpt-000600/
        model.safetensors      the parameters, float32, named as GPT.state_dict()
        optimizer.safetensors  AdamW's flat moments m and v
        config.json            the GPTConfig
        state.json             step, optimizer step, data-loader RNG, tokenizer reference and
                               hash, the run's arguments, the loss history
        tokenizer.json         the BPE tokenizer (absent for bytes), so a checkpoint is whole
      latest                   the name of the newest complete checkpoint

A save writes every file into a temporary directory beside the target, fsyncs them,
renames the directory into place and only then rewrites `latest` (a write to a temporary
file and an os.replace), so a crash at any moment leaves `latest` naming a complete
checkpoint. Older checkpoints of the run are removed after that. A checkpoint is never
written from parameters or moments that hold NaN or infinity.

Temporaries are named `.NAME~PID@HOST.tmp`, so the one left by a process that was killed
(kill -9, a power cut) is recognised and removed by the next run.
"""
import json
import os
import re
import shutil
import socket
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from safetensors import SafetensorError
from safetensors.numpy import load_file, save

from microgpt.config import ConfigError, GPTConfig, config_from_dict
from microgpt.errors import UserError
from microgpt.params import ParamLayout
from microgpt.tokenizer import TOKENIZER_FILE, tokenizer_from_reference

MODEL_FILE = "model.safetensors"
OPTIMIZER_FILE = "optimizer.safetensors"
CONFIG_FILE = "config.json"
STATE_FILE = "state.json"
LATEST = "latest"
PREFIX = "ckpt-"
FORMAT_VERSION = 1
# `.NAME.PID.tmp` without a host: the names of earlier versions, taken to be this host's
TEMPORARY = re.compile(r"^\.(?P<name>[^~@]+)[~.](?P<pid>\d+)(@(?P<host>.*))?\.(tmp|old)$")


@dataclass
class Checkpoint:
    path: Path
    config: GPTConfig
    params: dict         # name -> float32 array, the model's state_dict
    moments: dict        # "m", "v" -> (n_params,) float32; None when loaded without them
    state: dict          # state.json
    tokenizer: object


def save_checkpoint(run_dir, model, optimizer_state, tokenizer, state):
    """Write a checkpoint of model, the optimizer's state (the (moments, meta) of its
    state_dict(), which under ZeRO-1 every rank calls and rank 0 receives whole) and state
    (a JSON-able dict holding at least "step") into run_dir and point `latest` at it;
    -> its path."""
    run_dir = Path(run_dir)
    name = f"{PREFIX}{state['step']:06d}"
    params = model.state_dict()
    moments, optimizer_meta = optimizer_state
    if not all(np.isfinite(t).all() for t in [*params.values(), *moments.values()]):
        raise UserError(f"the parameters at step {state['step']} hold NaN or infinity: training "
                        f"diverged, no checkpoint written; start again with a smaller --lr")
    state = {**state, "format": FORMAT_VERSION, "optimizer": optimizer_meta,
             "tokenizer": tokenizer.reference()}
    try:
        with atomic_directory(run_dir / name) as tmp:
            (tmp / MODEL_FILE).write_bytes(save(params, metadata={"format": "microgpt"}))
            (tmp / OPTIMIZER_FILE).write_bytes(save(
                {k: np.ascontiguousarray(v, np.float32) for k, v in moments.items()}))
            (tmp / CONFIG_FILE).write_text(json.dumps(asdict(model.config), indent=2) + "\n")
            (tmp / STATE_FILE).write_text(json.dumps(state, indent=1) + "\n")
            if state["tokenizer"]["kind"] == "bpe":
                tokenizer.save(tmp / TOKENIZER_FILE)
        atomic_file(run_dir / LATEST, lambda tmp: tmp.write_text(name + "\n"))
    except OSError as err:
        raise UserError(f"cannot write a checkpoint in {run_dir} ({err.strerror}); "
                        "pass a writable --out DIR") from None
    for old in run_dir.glob(PREFIX + "*"):
        if old.name != name:
            shutil.rmtree(old, ignore_errors=True)
    return run_dir / name


@contextmanager
def atomic_directory(target):
    """Yield a fresh directory beside target to fill; on a clean exit its files are fsynced
    and it is renamed to target (replacing an old one), so a reader sees all of it or none.
    On an error it is removed and target is left as it was."""
    target = Path(target)
    tmp = temporary_path(target)
    old = tmp.with_suffix(".old")
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(tmp, ignore_errors=True)      # left by a crashed process with our pid
    os.mkdir(tmp)
    try:
        yield tmp
        for f in tmp.iterdir():
            _fsync(f)
        _fsync(tmp)
        if target.exists():
            os.rename(target, old)
        os.rename(tmp, target)
        _fsync(target.parent)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(old, ignore_errors=True)


def atomic_file(path, write):
    """write(temporary path) fills a file that then replaces path at once (fsynced first),
    so a reader, or a crash, never meets half of it."""
    path = Path(path)
    tmp = temporary_path(path)
    try:
        write(tmp)
        _fsync(tmp)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def temporary_path(target):
    """Where target is prepared before it is renamed into place: hidden, beside it, and
    naming this process and host, so remove_stale_temporaries can tell when it is stale."""
    return target.with_name(f".{target.name}~{os.getpid()}@{socket.gethostname()}.tmp")


def remove_stale_temporaries(directory, owned=False):
    """Remove the temporaries that killed processes left in directory. owned: this process
    holds the directory's lock, so every temporary in it is stale; otherwise only those of
    this host whose process has ended are (a live writer's must stay)."""
    host = socket.gethostname()
    for path in Path(directory).glob(".*"):
        match = TEMPORARY.match(path.name)
        if match and (owned or (match["host"] in (host, None)
                                and not _alive(int(match["pid"])))):
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:     # another user's process
        return True
    return True


def find_checkpoint(path):
    """A checkpoint directory, or a run directory whose `latest` names one -> the checkpoint."""
    path = Path(path)
    if not path.exists():
        raise UserError(f"{path} does not exist; pass a checkpoint directory or the run "
                        "directory that holds one")
    if (path / STATE_FILE).is_file():
        return path
    if (path / LATEST).is_file():
        target = path / (path / LATEST).read_text().strip()
        if not (target / STATE_FILE).is_file():
            raise UserError(f"{path / LATEST} names {target.name}, which is not a complete "
                            "checkpoint; pass one of the run's checkpoint directories")
        return target
    runs = sorted(p.name for p in path.iterdir() if (p / LATEST).is_file()) \
        if path.is_dir() else []
    if runs:
        shown = ", ".join(runs[-5:]) + (f" (and {len(runs) - 5} older)" if len(runs) > 5 else "")
        raise UserError(f"{path} is not a run directory but holds runs: {shown}; pass one of "
                        f"them, e.g. {path / runs[-1]}")
    raise UserError(f"{path} is not a checkpoint (no {STATE_FILE}) nor a run directory (no "
                    f"{LATEST}); pass the run's directory (by default runs/DATE-TIME) or one "
                    "of its checkpoints")


def load_checkpoint(path, optimizer=True):
    """-> Checkpoint, every file checked against the others; UserError if anything is
    missing, unreadable, inconsistent or not finite. optimizer=False skips the moments
    (sampling needs none)."""
    path = find_checkpoint(path)
    state = _read_json(path / STATE_FILE)
    version = state.get("format")
    if type(version) is int and version > FORMAT_VERSION:
        raise UserError(f"checkpoint {path} has format {version}, from a newer microgpt; this "
                        f"one reads format {FORMAT_VERSION}: upgrade microgpt-engine")
    if version != FORMAT_VERSION:
        raise _corrupt(path, STATE_FILE, f"format {version!r}, expected {FORMAT_VERSION}")
    try:
        config = config_from_dict(_read_json(path / CONFIG_FILE))
    except (ConfigError, TypeError) as err:
        raise _corrupt(path, CONFIG_FILE, err) from None
    params = _read_tensors(path, MODEL_FILE)
    moments = _read_tensors(path, OPTIMIZER_FILE) if optimizer else None
    layout = ParamLayout(config)
    expected = {s.name: s.shape for s in layout.specs}
    found = {name: tuple(t.shape) for name, t in params.items()}
    if found != expected:
        wrong = sorted(n for n in expected.keys() | found.keys() if expected.get(n) != found.get(n))
        raise UserError(f"checkpoint {path} does not match its {CONFIG_FILE}: tensors "
                        f"{', '.join(wrong[:3])} are missing or misshapen; the checkpoint "
                        "is damaged, use another one")
    if moments is not None and ({k: v.shape for k, v in moments.items()}
                                != {"m": (layout.size,), "v": (layout.size,)}):
        raise UserError(f"checkpoint {path}: {OPTIMIZER_FILE} does not hold moments m and v "
                        f"of {layout.size} values; the checkpoint is damaged, use another one")
    step, meta = state.get("step"), state.get("optimizer")
    if not (type(step) is int and step >= 0 and isinstance(meta, dict)
            and type(meta.get("step")) is int and meta["step"] >= 0
            and isinstance(state.get("tokenizer"), dict)):
        raise _corrupt(path, STATE_FILE, "step, optimizer or tokenizer missing or malformed")
    tokenizer = tokenizer_from_reference(state["tokenizer"], path)
    return Checkpoint(path, config, params, moments, state, tokenizer)


def _read_json(file):
    try:
        value = json.loads(file.read_text())
    except FileNotFoundError:
        raise UserError(f"checkpoint {file.parent} lacks {file.name}; the checkpoint is "
                        "incomplete, use another one") from None
    except (OSError, ValueError) as err:
        raise _corrupt(file.parent, file.name, err) from None
    if not isinstance(value, dict):
        raise _corrupt(file.parent, file.name, "not a JSON object")
    return value


def _read_tensors(path, name):
    try:
        tensors = load_file(path / name)
    except FileNotFoundError:
        raise UserError(f"checkpoint {path} lacks {name}; the checkpoint is incomplete, use "
                        "another one") from None
    except (SafetensorError, OSError, ValueError) as err:
        raise _corrupt(path, name, err) from None
    if any(t.dtype != np.float32 for t in tensors.values()):
        raise _corrupt(path, name, "tensors are not float32")
    bad = sorted(k for k, t in tensors.items() if not np.isfinite(t).all())
    if bad:
        raise UserError(f"checkpoint {path}: {name} holds NaN or infinity (in {bad[0]}), from a "
                        "run that diverged; use an earlier checkpoint")
    return tensors


def _corrupt(path, name, err):
    reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    return UserError(f"checkpoint {path}: {name} is corrupt ({reason}); use another checkpoint")


def _fsync(path):
    """Flush a file or a directory entry to disk (a directory is opened read-only)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
