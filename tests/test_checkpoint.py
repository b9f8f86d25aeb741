"""Checkpoints: an exact round trip, atomic saves, and a clear error for every damage."""
import json
import os
import socket
import subprocess
import sys

import numpy as np
import pytest

from microgpt import GPT, get_config
from microgpt import checkpoint as ckpt_module
from microgpt.checkpoint import (CONFIG_FILE, LATEST, MODEL_FILE, OPTIMIZER_FILE, STATE_FILE,
                                 atomic_file, load_checkpoint, remove_stale_temporaries,
                                 save_checkpoint)
from microgpt.errors import UserError
from microgpt.optim import AdamW, AdamWConfig
from microgpt.tokenizer import TOKENIZER_FILE, BPETokenizer, ByteTokenizer

CONFIG = get_config("microgpt", vocab_size=64)


def trained(seed):
    """A tiny model and optimizer after two steps on fresh random tokens."""
    model = GPT(CONFIG, seed=seed)
    optimizer = AdamW(model, AdamWConfig(lr=1e-2, total_steps=10))
    rng = np.random.default_rng(seed)
    for _ in range(2):
        tokens = rng.integers(0, CONFIG.vocab_size, (2, CONFIG.context + 1))
        model.forward_backward(tokens[:, :-1], tokens[:, 1:])
        optimizer.step(1e-2)
    return model, optimizer


def save(run_dir, step, seed=0, tokenizer=None):
    model, optimizer = trained(seed)
    state = {"step": step, "extra": {"rng": [2**100, 3]}}
    path = save_checkpoint(run_dir, model, optimizer.state_dict(), tokenizer or ByteTokenizer(),
                           state)
    return path, model, optimizer


def test_round_trip_is_exact(tmp_path):
    path, model, optimizer = save(tmp_path / "run", step=2)
    ckpt = load_checkpoint(tmp_path / "run")          # a run directory: follows latest
    assert ckpt.path == path == tmp_path / "run" / "ckpt-000002"
    assert ckpt.config == CONFIG
    assert ckpt.state["step"] == 2 and ckpt.state["extra"] == {"rng": [2**100, 3]}
    for name, value in model.state_dict().items():
        assert ckpt.params[name].dtype == np.float32
        np.testing.assert_array_equal(ckpt.params[name], value)
    moments, meta = optimizer.state_dict()
    np.testing.assert_array_equal(ckpt.moments["m"], moments["m"])
    np.testing.assert_array_equal(ckpt.moments["v"], moments["v"])
    assert ckpt.state["optimizer"] == meta
    assert isinstance(ckpt.tokenizer, ByteTokenizer)

    restored = GPT(CONFIG, seed=99)
    restored.load_state_dict(ckpt.params)
    idx = np.random.default_rng().integers(0, CONFIG.vocab_size, (2, CONFIG.context))
    np.testing.assert_array_equal(restored.forward(idx), model.forward(idx))


def test_bpe_tokenizer_travels_with_the_checkpoint(tmp_path):
    bpe = BPETokenizer.train(["x = 1\ny = 2\n"] * 20, 300)
    path, _, _ = save(tmp_path / "run", step=1, tokenizer=bpe)
    assert (path / TOKENIZER_FILE).is_file()
    assert load_checkpoint(path).tokenizer.fingerprint == bpe.fingerprint


def test_a_new_save_replaces_the_old_and_moves_latest(tmp_path):
    save(tmp_path / "run", step=1)
    save(tmp_path / "run", step=2, seed=1)
    save(tmp_path / "run", step=2, seed=2)                  # the same step again
    names = sorted(p.name for p in (tmp_path / "run").iterdir())
    assert names == ["ckpt-000002", LATEST]                 # no temporaries left behind
    assert (tmp_path / "run" / LATEST).read_text().strip() == "ckpt-000002"
    model, _ = trained(seed=2)
    np.testing.assert_array_equal(load_checkpoint(tmp_path / "run").params["wte"],
                                  model.state_dict()["wte"])


def test_a_crash_while_saving_keeps_the_last_good_checkpoint(tmp_path, monkeypatch):
    good, model, _ = save(tmp_path / "run", step=1)

    def crash(*args, **kwargs):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(ckpt_module, "_fsync", crash)       # fails after the files are written
    with pytest.raises(UserError, match="cannot write a checkpoint.*No space left"):
        save(tmp_path / "run", step=2, seed=1)
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["ckpt-000001", LATEST]
    monkeypatch.undo()
    ckpt = load_checkpoint(tmp_path / "run")
    assert ckpt.path == good
    np.testing.assert_array_equal(ckpt.params["wte"], model.state_dict()["wte"])


def test_unwritable_run_directory(tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(UserError, match="cannot write a checkpoint"):
        save(tmp_path / "file" / "run", step=1)


def rewrite_json(name, change):
    def damage(path):
        value = json.loads((path / name).read_text())
        change(value)
        (path / name).write_text(json.dumps(value))
    return damage


def truncate(name):
    def damage(path):
        content = (path / name).read_bytes()
        (path / name).write_bytes(content[:len(content) // 2])
    return damage


def poison(name, tensor, value):
    def damage(path):
        from safetensors.numpy import load_file, save_file
        tensors = load_file(path / name)
        tensors[tensor].flat[1] = value
        save_file(tensors, path / name)
    return damage


def replace_tensors(name, tensors):
    def damage(path):
        from safetensors.numpy import save_file
        save_file(tensors, path / name)
    return damage


@pytest.mark.parametrize("damage, message", [
    (lambda p: (p / STATE_FILE).unlink(), "not a checkpoint"),
    (lambda p: (p / MODEL_FILE).unlink(), "lacks model.safetensors"),
    (lambda p: (p / CONFIG_FILE).unlink(), "lacks config.json"),
    (truncate(MODEL_FILE), "model.safetensors is corrupt"),
    (truncate(OPTIMIZER_FILE), "optimizer.safetensors is corrupt"),
    (truncate(STATE_FILE), "state.json is corrupt"),
    (lambda p: (p / CONFIG_FILE).write_text("[1, 2]"), "config.json is corrupt"),
    (rewrite_json(CONFIG_FILE, lambda c: c.pop("n_head")), "config.json is corrupt"),
    (rewrite_json(CONFIG_FILE, lambda c: c.update(d_model=32, n_head=4)), "does not match"),
    (rewrite_json(STATE_FILE, lambda s: s.pop("step")), "state.json is corrupt"),
    (rewrite_json(STATE_FILE, lambda s: s.update(tokenizer={"kind": "sentencepiece"})),
     "unknown tokenizer kind"),
    (replace_tensors(OPTIMIZER_FILE, {"m": np.zeros(3, np.float32), "v": np.zeros(3, np.float32)}),
     "does not hold moments"),
    (replace_tensors(MODEL_FILE, {"wte": np.zeros((64, 16), np.float64)}), "not float32"),
    (rewrite_json(STATE_FILE, lambda s: s.update(format=2)), "format 2, from a newer microgpt"),
    (rewrite_json(STATE_FILE, lambda s: s.pop("format")), "state.json is corrupt"),
    (rewrite_json(STATE_FILE, lambda s: s.update(step=-1)), "state.json is corrupt"),
    (rewrite_json(STATE_FILE, lambda s: s.update(optimizer={"step": None})),
     "state.json is corrupt"),
    (rewrite_json(STATE_FILE, lambda s: s.update(tokenizer={"kind": "bpe"})),
     "state.json is damaged"),
    (rewrite_json(STATE_FILE, lambda s: s.update(
        tokenizer={"kind": "bpe", "file": "../../tokenizer.json", "sha256": "0"})),
     "state.json is damaged"),
    (rewrite_json(STATE_FILE, lambda s: s.update(tokenizer={"kind": "ids"})),
     "state.json is damaged"),
    (poison(MODEL_FILE, "h.0.attn.w_qkv", np.nan), "holds NaN or infinity"),
    (poison(OPTIMIZER_FILE, "v", np.inf), "holds NaN or infinity"),
])
def test_damaged_checkpoint(tmp_path, damage, message):
    path, _, _ = save(tmp_path / "run", step=3)
    damage(path)
    with pytest.raises(UserError, match=message):
        load_checkpoint(path)


def test_latest_naming_a_missing_checkpoint(tmp_path):
    save(tmp_path / "run", step=3)
    (tmp_path / "run" / LATEST).write_text("ckpt-000009\n")
    with pytest.raises(UserError, match="not a complete checkpoint"):
        load_checkpoint(tmp_path / "run")


def test_missing_checkpoint(tmp_path):
    with pytest.raises(UserError, match="does not exist"):
        load_checkpoint(tmp_path / "nowhere")
    with pytest.raises(UserError, match="not a checkpoint"):
        load_checkpoint(tmp_path)


def test_sampling_loads_without_the_moments(tmp_path):
    path, model, _ = save(tmp_path / "run", step=3)
    (path / OPTIMIZER_FILE).unlink()
    ckpt = load_checkpoint(path, optimizer=False)
    assert ckpt.moments is None
    np.testing.assert_array_equal(ckpt.params["wte"], model.state_dict()["wte"])
    with pytest.raises(UserError, match="lacks optimizer.safetensors"):
        load_checkpoint(path)


@pytest.mark.parametrize("value", [np.nan, np.inf])
def test_no_checkpoint_from_non_finite_parameters(tmp_path, value):
    good, _, _ = save(tmp_path / "run", step=1)
    model, optimizer = trained(seed=1)
    model.params_flat[3] = value
    with pytest.raises(UserError, match="hold NaN or infinity"):
        save_checkpoint(tmp_path / "run", model, optimizer.state_dict(), ByteTokenizer(),
                        {"step": 2})
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["ckpt-000001", LATEST]
    assert load_checkpoint(tmp_path / "run").path == good


def test_stale_temporaries_are_recognised(tmp_path):
    """A temporary names its process and host: one whose process has ended is removed, a
    live writer's stays, and a locked directory's owner removes them all."""
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                           capture_output=True, text=True).stdout.strip()
    host = socket.gethostname()
    dead = [tmp_path / f".key1~{ended}@{host}.tmp", tmp_path / f".key2.{ended}.tmp",
            tmp_path / f".key3~{ended}@{host}.old"]
    live = tmp_path / f".key4~{os.getpid()}@{host}.tmp"
    elsewhere = tmp_path / f".key5~{ended}@another-{host}.tmp"
    kept = [tmp_path / ".hidden", tmp_path / "key6.tmp"]
    for path in [*dead, live, elsewhere, *kept]:
        path.mkdir()
    (dead[0] / "model.safetensors").write_bytes(b"half")
    remove_stale_temporaries(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        p.name for p in [live, elsewhere, *kept])
    remove_stale_temporaries(tmp_path, owned=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in kept)


def test_atomic_file_replaces_at_once_or_not_at_all(tmp_path):
    target = tmp_path / "loss.png"
    target.write_bytes(b"old")

    def half_then_full(tmp):
        tmp.write_bytes(b"ha")
        raise OSError(28, "No space left on device")
    with pytest.raises(OSError):
        atomic_file(target, half_then_full)
    assert target.read_bytes() == b"old" and list(tmp_path.iterdir()) == [target]
    atomic_file(target, lambda tmp: tmp.write_bytes(b"new"))
    assert target.read_bytes() == b"new" and list(tmp_path.iterdir()) == [target]
