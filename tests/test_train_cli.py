"""python -m microgpt.train and microgpt.sample end to end, on the tiny config.

Most runs call main() in this process (a few ms per step); the ones that need a real
process (the console entry, Ctrl-C, a machine without the cuda backend) start one.
"""
import json
import os
import signal
import subprocess
import sys

import numpy as np
import pytest

from microgpt import GPT, get_config, sample, train
from microgpt.backend import cuda_available
from microgpt.checkpoint import LATEST, load_checkpoint
from microgpt.data import write_shard

WORDS = ["def", "return", "self", "import", "class", "for", "in", "range", "print", "if",
         "else", "None", "True", "(", ")", ":", "=", "+", "0", "1", "\n", "    "]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """A directory of 30 small random text documents, about 9k characters."""
    root = tmp_path_factory.mktemp("corpus")
    rng = np.random.default_rng()
    for i in range(30):
        (root / f"doc{i:02d}.py").write_text(" ".join(rng.choice(WORDS, 80)))
    return root


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("cache")


@pytest.fixture
def tiny(corpus, cache):
    """Arguments for a few-millisecond-per-step run of the microgpt config."""
    return ["--config", "microgpt", "--data", str(corpus), "--cache-dir", str(cache),
            "--batch-size", "4", "--eval-batches", "2", "--log-every", "1",
            "--sample-every", "0"]


def run_main(args, capsys):
    status = train.main([str(a) for a in args])
    out, err = capsys.readouterr()
    return status, out, err


def python(*args, **kwargs):
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env,
                          timeout=120, **kwargs)


def history(run_dir):
    return load_checkpoint(run_dir).state["history"]


# ----------------------------------------------------------------------------------
# runs that work

def test_train_then_sample_in_fresh_processes(tiny, tmp_path):
    out = tmp_path / "run"
    result = python("-m", "microgpt.train", *tiny, "--steps", "8", "--eval-every", "4",
                    "--sample-every", "4", "--checkpoint-every", "4", "--out", str(out))
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stdout.splitlines() if line.startswith("step ")]
    assert len(lines) == 8
    for field in ("loss ", "lr ", "norm ", "ms/step", "tok/s"):
        assert all(field in line for line in lines)
    assert "val " in lines[3] and "val " in lines[7] and "val " not in lines[0]
    assert "--- sample at step 4 ---" in result.stdout
    assert "done: 8 steps" in result.stdout and "unigram entropy" in result.stdout
    assert sorted(p.name for p in out.iterdir()) == ["ckpt-000008", LATEST, "loss.png",
                                                      "samples.txt"]
    assert (out / "loss.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (out / "samples.txt").read_text().startswith("--- sample 1 ---")
    assert len(history(out)["train"]) == 8 and [s for s, _ in history(out)["val"]] == [4, 8]

    sampled = python("-m", "microgpt.sample", "--checkpoint", str(out), "--prompt", "def",
                     "--tokens", "12", "--seed", "3")
    assert sampled.returncode == 0, sampled.stderr
    assert sampled.stdout.startswith("def")
    again = python("-m", "microgpt.sample", "--checkpoint", str(out / "ckpt-000008"),
                   "--prompt", "def", "--tokens", "12", "--seed", "3")
    assert again.stdout == sampled.stdout                    # a seed fixes the sample


def test_resume_is_bit_identical(tiny, tmp_path, capsys):
    schedule = ["--steps", "6", "--eval-every", "2", "--lr", "1e-2", "--warmup", "2"]
    straight, split = tmp_path / "straight", tmp_path / "split"
    assert run_main([*tiny, *schedule, "--out", straight], capsys)[0] == 0
    status, out, _ = run_main([*tiny, *schedule, "--out", split, "--stop-at", "3"], capsys)
    assert status == 0 and "stopped at step 3" in out
    assert load_checkpoint(split).state["step"] == 3
    status, out, _ = run_main(["--resume", split], capsys)
    assert status == 0 and "resuming" in out

    expected, resumed = history(straight), history(split)
    assert len(resumed["train"]) == 6
    assert resumed == expected                               # exact floats, val included
    a, b = load_checkpoint(straight), load_checkpoint(split)
    for name in a.params:
        np.testing.assert_array_equal(a.params[name], b.params[name])
    np.testing.assert_array_equal(a.moments["v"], b.moments["v"])


def test_ctrl_c_saves_a_checkpoint_and_exits(tiny, tmp_path):
    out = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "microgpt.train", *tiny, "--steps", "1000000",
                             "--eval-every", "0", "--checkpoint-every", "0", "--out", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        while not proc.stdout.readline().startswith("step "):   # training has begun
            assert proc.poll() is None, proc.stderr.read()
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130
    assert "Traceback" not in stderr and "Ctrl-C" in stderr
    step = load_checkpoint(out).state["step"]
    assert f"stopped at step {step}" in stdout
    assert len(history(out)["train"]) == step


def test_bytes_tokenizer(tiny, tmp_path, capsys):
    status, out, _ = run_main([*tiny, "--tokenizer", "bytes", "--steps", "2", "--out",
                               tmp_path / "run"], capsys)
    assert status == 0 and "bytes tokenizer, 256 tokens" in out
    assert load_checkpoint(tmp_path / "run").config.vocab_size == 256


def test_llmc_shards(tmp_path, cache, capsys):
    rng = np.random.default_rng()
    write_shard(tmp_path / "data_train_000001.bin", rng.integers(0, 500, 2000))
    write_shard(tmp_path / "data_val_000000.bin", rng.integers(0, 500, 300))
    status, out, _ = run_main(["--config", "microgpt", "--data", tmp_path, "--vocab-size", 512,
                               "--steps", 2, "--batch-size", 2, "--eval-batches", 1,
                               "--cache-dir", cache, "--out", tmp_path / "run"], capsys)
    assert status == 0 and "2,000 train and 300 val tokens" in out
    sampled = sample.main(["--checkpoint", str(tmp_path / "run"), "--prompt", "1 2 3",
                           "--tokens", "4"])
    words = capsys.readouterr().out.split()
    assert sampled == 0 and len(words) == 7 and all(0 <= int(w) < 512 for w in words)


def test_resume_may_extend_the_run(tiny, tmp_path, capsys):
    assert run_main([*tiny, "--steps", 2, "--out", tmp_path / "run"], capsys)[0] == 0
    status, out, _ = run_main(["--resume", tmp_path / "run", "--steps", 4], capsys)
    assert status == 0 and "step 4/4" in out
    assert len(history(tmp_path / "run")["train"]) == 4


# ----------------------------------------------------------------------------------
# the run with no arguments

def test_default_run_configuration():
    """No arguments: the microgpt family at CPU size on the standard library, BPE at 1024
    tokens, and the schedule docs/training.md measured."""
    args = train.resolve_args(train.parse_args([]), None)
    assert args.config is None and args.data is None and args.tokenizer is None
    config = train.model_config(args, train.DEFAULT_BPE_VOCAB)
    assert (config.n_layer, config.d_model, config.n_head, config.context,
            config.vocab_size) == (1, 128, 4, 128, 1024)
    assert (args.steps, args.batch_size, args.lr, args.warmup) == (1200, 16, 3e-3, 60)
    assert args.eval_every and args.steps % args.eval_every == 0


def write(path, content):
    path.write_bytes(content)
    return path


BAD_INPUTS = {
    "missing data": (lambda d: ["--data", d / "missing"], "does not exist"),
    "empty corpus": (lambda d: ["--data", write(d / "empty.txt", b"")], "is empty"),
    "binary corpus": (lambda d: ["--data", write(d / "x.txt", bytes(range(256)))], "not UTF-8"),
    "shorter than a context": (lambda d: ["--data", write(d / "short.txt", b"a tiny text")],
                               "fewer than one context"),
    "shard magic": (lambda d: ["--data", write(d / "x.bin", b"\0" * 2048)],
                    "not an llm.c token shard"),
    "truncated shard": (lambda d: ["--data", write(d / "x.bin", np.array(
        [20240520, 1, 5000] + [0] * 253, "<i4").tobytes() + b"\0" * 100)], "truncated"),
    "unknown config": (lambda d: ["--config", "gpt-5"], "unknown config 'gpt-5'"),
    "bad config": (lambda d: ["--n-head", "3"], "divisible by n_head"),
    "unknown tokenizer": (lambda d: ["--tokenizer", d / "nope.json"], "not bpe, bytes or"),
    "unwritable out": (lambda d: ["--out", write(d / "file", b"") / "run"], "cannot be written"),
    "out is a file": (lambda d: ["--out", write(d / "file", b"")], "is a file"),
    "cuda on the cpu": (lambda d: ["--device", "cuda"], "--device cuda"),
}


@pytest.mark.parametrize("case", BAD_INPUTS)
def test_bad_input(case, tiny, tmp_path, capsys):
    if case == "cuda on the cpu" and (cuda_available() or "NUMBA_ENABLE_CUDASIM" in os.environ):
        pytest.skip("cuda runs here (a GPU or the simulator); see test_cuda_without_a_gpu")
    make, message = BAD_INPUTS[case]
    out = tmp_path / "run"
    status, stdout, err = run_main([*tiny, "--steps", 2, "--out", out, *make(tmp_path)], capsys)
    assert status == 2
    assert err.count("\n") == 1 and err.startswith("microgpt.train: error: ") and message in err
    assert not out.exists()


@pytest.mark.skipif(cuda_available(), reason="a GPU is here: --device cuda trains")
def test_cuda_without_a_gpu(tiny, tmp_path):
    result = python("-m", "microgpt.train", *tiny, "--steps", "2", "--device", "cuda",
                    "--out", str(tmp_path / "run"))
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "--device cuda" in result.stderr
    assert result.stdout == "", "the device is checked before any data work"
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("flag, value", [("--steps", "0"), ("--steps", "-5"),
                                         ("--batch-size", "0"), ("--batch-size", "-1"),
                                         ("--lr", "0"), ("--steps", "many")])
def test_bad_numbers(flag, value, tiny, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        train.main([*tiny, flag, value, "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2
    assert err.count("\n") == 1 and flag in err
    assert not (tmp_path / "run").exists()


def damage_state(change):
    def damage(run_dir):
        state_file = load_checkpoint(run_dir).path / "state.json"
        state = json.loads(state_file.read_text())
        change(state)
        state_file.write_text(json.dumps(state))
    return damage


@pytest.mark.parametrize("damage, extra, message", [
    (lambda d: (load_checkpoint(d).path / "model.safetensors").write_bytes(b"junk"), [],
     "model.safetensors is corrupt"),
    (lambda d: (d / LATEST).unlink(), [], "not a checkpoint"),
    (damage_state(lambda s: s.pop("args")), [], "lacks the run's settings"),
    (damage_state(lambda s: s.update(loader={"rng": 5})), [], "state.json is damaged"),
    (lambda d: None, ["--config", "andrea-12m"], "--config andrea-12m differs"),
    (lambda d: None, ["--batch-size", "8"], "--batch-size 8 differs"),
    (lambda d: None, ["--steps", "2"], "nothing left to train"),
])
def test_bad_resume(damage, extra, message, tiny, tmp_path, capsys):
    run_dir = tmp_path / "run"
    assert run_main([*tiny, "--steps", 4, "--stop-at", 2, "--out", run_dir], capsys)[0] == 0
    damage(run_dir)
    before = sorted(p.name for p in run_dir.rglob("*"))
    status, _, err = run_main(["--resume", run_dir, *extra], capsys)
    assert status == 2
    assert err.count("\n") == 1 and message in err
    assert sorted(p.name for p in run_dir.rglob("*")) == before


def test_a_run_directory_holds_one_run(tiny, tmp_path, capsys):
    first, second = tmp_path / "first", tmp_path / "second"
    for run_dir in (first, second):
        assert run_main([*tiny, "--steps", 2, "--out", run_dir], capsys)[0] == 0
    before = sorted(tmp_path.rglob("*"))
    for argv in ([*tiny, "--steps", 2, "--out", first],                 # a new run
                 ["--resume", first, "--steps", 4, "--out", second]):   # another run's resume
        status, _, err = run_main(argv, capsys)
        assert status == 2 and err.count("\n") == 1 and "already holds a run" in err
    assert sorted(tmp_path.rglob("*")) == before


def test_generate_pads_slides_and_respects_the_vocabulary():
    model = GPT(get_config("microgpt", vocab_size=64), seed=1)
    rng = np.random.default_rng()
    prompt = list(rng.integers(0, 64, 5))
    greedy = sample.generate(model, prompt, 20, temperature=0, top_k=0, rng=rng, vocab_limit=64)
    # the padded window gives what the unpadded sequence gives, also past the context (16)
    ids = prompt + greedy
    for i in range(len(prompt), len(ids)):
        window = np.array([ids[max(0, i - 16):i]])
        assert ids[i] == int(np.argmax(model.forward(window)[0, -1]))
    assert sample.generate(model, prompt, 20, temperature=1.0, top_k=1, rng=rng,
                           vocab_limit=64) == greedy
    limited = sample.generate(model, prompt, 50, temperature=2.0, top_k=0, rng=rng, vocab_limit=10)
    assert all(0 <= t < 10 for t in limited)


def test_progress_draws_a_live_line_on_a_terminal(monkeypatch, capsys):
    class Terminal:
        written = ""
        def isatty(self):
            return True
        def write(self, text):
            self.written += text
        def flush(self):
            pass
    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    progress = train.Progress(total_steps=10)
    progress.step(3, 2.5, 0.25)
    assert terminal.written.startswith("\rstep 3/10 | loss 2.5000") and "eta 2s" in terminal.written
    progress.log_step(3, 2.5, None, 1e-3, 0.5, tokens_per_step=1000)
    assert terminal.written.endswith("\r\033[K")                    # the live line is cleared
    assert capsys.readouterr().out == ("step  3/10 | loss 2.5000 | lr 1.00e-03 | norm 0.5000 | "
                                       "250 ms/step | 4,000 tok/s\n")


def test_sample_bad_checkpoint(tmp_path, capsys):
    assert sample.main(["--checkpoint", str(tmp_path / "nothing")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "does not exist" in err
