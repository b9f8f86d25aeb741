"""python -m microgpt.train and microgpt.sample end to end, on the tiny config.

Most runs call main() in this process (a few ms per step); the ones that need a real
process (the console entry, Ctrl-C, a machine without the cuda backend) start one.
"""
import errno
import fcntl
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

import microgpt.run
from microgpt import GPT, sample, train
from microgpt.backend import NumpyBackend, cuda_available
from microgpt.checkpoint import LATEST, OPTIMIZER_FILE, load_checkpoint
from microgpt.config import get_config
from microgpt.data import write_shard
from microgpt.progress import Progress
from microgpt.run import model_config
from microgpt.step import Step
from microgpt.train_args import DEFAULT_BPE_VOCAB, parse_args, resolve_args

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
                                                      "metrics.jsonl", "samples.txt"]
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


def test_eval_batches_0_scores_the_whole_validation_split(tiny, corpus, cache, tmp_path,
                                                          capsys):
    """--eval-batches 0: the validation loss is the mean over every token of the split, here
    computed directly, window by window in float64 from the checkpoint's parameters, with a
    batch size that leaves the last batch short."""
    from microgpt import reference as ref
    from microgpt.data import load_tokens

    val = load_tokens(str(corpus), None, DEFAULT_BPE_VOCAB, cache).val
    T = model_config(resolve_args(parse_args(tiny), None), DEFAULT_BPE_VOCAB).context
    windows = [(s[k:k + T], s[k + 1:k + T + 1]) for s in val
               for k in range(0, (len(s) - 1) // T * T, T)]
    B = next(b for b in (4, 3, 5, 7) if len(windows) % b)
    out = tmp_path / "run"
    status, _, err = run_main([*tiny, "--batch-size", B, "--eval-batches", 0, "--steps", 2,
                               "--out", out], capsys)
    assert status == 0, err
    ckpt = load_checkpoint(out)
    model = GPT(ckpt.config, dtype=np.float64)
    model.load_state_dict(ckpt.params)
    losses = [ref.crossentropy_forward(model.forward(x[None].astype(np.int32))[0],
                                       y.astype(np.int64))[0] for x, y in windows]
    direct = np.concatenate(losses).mean()
    assert abs(history(out)["val"][-1][1] - direct) <= 1e-5 * direct


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


@pytest.mark.parametrize("signum, name", [(signal.SIGINT, "Ctrl-C"), (signal.SIGTERM, "SIGTERM")])
def test_a_signal_saves_a_checkpoint_and_exits(signum, name, tiny, tmp_path):
    """Ctrl-C, and SIGTERM (what timeout, Slurm and Kubernetes send), finish the step,
    save, and exit with 128 + the signal's number."""
    out = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "microgpt.train", *tiny, "--steps", "1000000",
                             "--eval-every", "0", "--checkpoint-every", "0", "--out", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        while not proc.stdout.readline().startswith("step "):   # training has begun
            assert proc.poll() is None, proc.stderr.read()
        proc.send_signal(signum)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 128 + signum
    assert "Traceback" not in stderr and name in stderr
    step = load_checkpoint(out).state["step"]
    assert f"stopped at step {step}" in stdout
    assert len(history(out)["train"]) == step


SECOND_SIGNAL = """
import os, signal, sys
from microgpt import train
save, calls = train.save, []
def save_then_twice_ctrl_c(run, progress, val):
    calls.append(run.step)
    if len(calls) == 2:     # the second checkpoint: the first is complete
        os.kill(os.getpid(), signal.SIGINT)
        os.kill(os.getpid(), signal.SIGINT)
    return save(run, progress, val)
train.save = save_then_twice_ctrl_c
sys.exit(train.main(sys.argv[1:]))
"""


def test_a_second_ctrl_c_stops_at_once_and_names_the_checkpoint_kept(tiny, tmp_path):
    """The second Ctrl-C (here during the second checkpoint's save) stops the run at once,
    and the message says which complete checkpoint is kept and how to continue."""
    out = tmp_path / "run"
    result = subprocess.run([sys.executable, "-c", SECOND_SIGNAL, *tiny, "--steps", "10",
                             "--checkpoint-every", "2", "--out", str(out)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 130, result.stderr
    lines = result.stderr.splitlines()
    assert lines[0].startswith("Ctrl-C: stopping after this step") and len(lines) == 2
    assert lines[1] == (f"microgpt.train: Ctrl-C again: stopped at once after step 4; its last "
                        f"complete checkpoint, {out / 'ckpt-000002'}, is kept: continue with "
                        f"python -m microgpt.train --resume {out}")
    assert load_checkpoint(out).state["step"] == 2


def test_closed_standard_streams(tiny, tmp_path):
    """`train >&- 2>&-` (a daemon, a cron job): Python has no stdout or stderr at all."""
    out = tmp_path / "run"

    def close_both():
        os.close(1)
        os.close(2)
    result = subprocess.run([sys.executable, "-m", "microgpt.train", *tiny, "--steps", "2",
                             "--out", str(out)], preexec_fn=close_both, timeout=120)
    assert result.returncode == 0
    assert load_checkpoint(out).state["step"] == 2


def test_a_closed_stdout_stops_the_log_not_the_training(tiny, tmp_path):
    """`train | head -3`: the reader goes away. Here it is gone before the first line, so
    every write meets a broken pipe, however the two processes are scheduled."""
    out = tmp_path / "run"
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        result = subprocess.run([sys.executable, "-m", "microgpt.train", *tiny, "--steps", "6",
                                 "--out", str(out)], stdout=write_end, stderr=subprocess.PIPE,
                                text=True, timeout=120)
    finally:
        os.close(write_end)
    assert result.returncode == 0 and result.stderr == ""
    assert load_checkpoint(out).state["step"] == 6
    assert (out / "samples.txt").is_file()


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
    args = resolve_args(parse_args([]), None)
    assert args.config == "microgpt-cpu" and args.data is None and args.tokenizer is None
    config = model_config(args, DEFAULT_BPE_VOCAB)
    assert config == get_config("microgpt-cpu", vocab_size=1024)    # the default has a name
    assert (config.n_layer, config.d_model, config.n_head, config.context,
            config.vocab_size) == (1, 128, 4, 128, 1024)
    assert (args.steps, args.batch_size, args.lr, args.warmup) == (1200, 16, 3e-3, 60)
    assert args.eval_every and args.steps % args.eval_every == 0



def test_default_precision_is_bf16_where_there_are_tensor_cores():
    """bf16 on a GPU with bf16 tensor cores, where flash attention takes the model's heads;
    fp32 on the CPU, in the simulator (whose tensor-core twins run ~1 s a launch) and for
    heads wider than 128; a given --precision is kept, and bf16 refused in one line where it
    cannot run."""
    from microgpt.cli import choose_precision
    from microgpt.config import get_config
    from microgpt.cuda_backend import CudaBackend
    from microgpt.errors import UserError

    narrow = get_config("microgpt", vocab_size=16, d_model=256, n_head=2)   # head_dim 128
    wide = get_config("microgpt", vocab_size=16, d_model=256, n_head=1)     # head_dim 256
    assert choose_precision(None, NumpyBackend(), narrow) == "fp32"
    gpu = CudaBackend()
    assert not gpu.bf16_tensor_cores
    assert choose_precision(None, gpu, narrow) == "fp32"
    gpu.bf16_tensor_cores = True      # what an sm_80+ device reports
    assert choose_precision(None, gpu, narrow) == "bf16"
    assert choose_precision(None, gpu, wide) == "fp32"
    assert choose_precision("fp32", gpu, narrow) == "fp32"
    assert choose_precision("bf16", gpu, narrow) == "bf16"
    with pytest.raises(UserError, match="head_dim 256 is wider than flash attention's tiles"):
        choose_precision("bf16", gpu, wide)
    with pytest.raises(UserError, match="--precision bf16 needs the cuda backend"):
        choose_precision("bf16", NumpyBackend(), narrow)
    assert parse_args([]).precision is None


def test_recompute_is_chosen_by_the_memory_it_saves(monkeypatch):
    """--recompute auto (the default) takes the first of off, gelu and all that the run
    fits with (each a float at random within the span where it is the first); a mode
    named is kept (on: all), and refused in one line that names the least mode that saves
    more and fits, where there is one."""
    from types import SimpleNamespace

    from microgpt import memory
    from microgpt.errors import UserError

    rng = np.random.default_rng()
    cfg = get_config("andrea-12m")
    args = SimpleNamespace(batch_size=8, eval_batches=2, grad_accum=1)
    kept, gelu, again = (memory.required_bytes(cfg, 8, "fp32", 2, recompute=mode)
                         for mode in ("off", "gelu", "all"))
    assert kept > gelu > again

    def chosen(available, recompute):
        monkeypatch.setattr(memory, "available_memory", lambda backend: ("the GPU", available))
        return memory.check_memory(cfg, args, SimpleNamespace(world_size=1), NumpyBackend(),
                                   "fp32", recompute=recompute)

    def within(lo, hi):     # a float in [lo, hi)
        return float(rng.uniform(lo, hi))
    assert parse_args([]).recompute == "auto"
    assert [parse_args(["--recompute", m]).recompute for m in ("off", "gelu", "all", "on")] \
        == ["off", "gelu", "all", "on"]
    assert (chosen(kept, "auto"), chosen(within(kept, 2 * kept), "auto"),
            chosen(within(gelu, kept), "auto"), chosen(within(again, gelu), "auto")) \
        == ("off", "off", "gelu", "all")
    assert (chosen(kept, "off"), chosen(gelu, "gelu"), chosen(again, "all"),
            chosen(again, "on"), chosen(kept, "gelu")) == ("off", "gelu", "all", "all", "gelu")
    assert [chosen(None, m) for m in ("auto", "off", "gelu", "all", "on")] == [
        "off", "off", "gelu", "all", "all"]  # memory unknown
    gib = 2 ** 30
    with pytest.raises(UserError, match=rf"available; pass --recompute gelu \(it needs "
                                        rf"{gelu / gib:,.1f} GiB\)"):
        chosen(within(gelu, kept), "off")
    for mode in ("off", "gelu"):
        with pytest.raises(UserError, match=r"available; pass --recompute all \(it needs"):
            chosen(within(again, gelu), mode)
    for mode in ("auto", "off", "gelu", "all", "on"):
        with pytest.raises(UserError, match="available; pass a smaller --batch-size"):
            chosen(within(0, again), mode)


def test_a_deterministic_run_counts_its_batch_sort(monkeypatch):
    """A deterministic backend's step carries the ids' token_runs with its batch (4 rows of
    (B, T) int32 a micro-batch where the default's has 2: microgpt.step.step_specs), and
    the memory check counts them: the run that fits the default's memory exactly is
    refused on a deterministic backend."""
    from types import SimpleNamespace

    from microgpt import memory
    from microgpt.errors import UserError

    cfg = get_config("andrea-12m")
    B, T, accum = 8, cfg.context, 3
    args = SimpleNamespace(batch_size=B, eval_batches=2, grad_accum=accum)
    plain, deterministic = (memory.required_bytes(cfg, B, "fp32", 2, accum=accum,
                                                  deterministic=again)
                            for again in (False, True))
    assert deterministic - plain == accum * 2 * B * T * 4
    monkeypatch.setattr(memory, "available_memory", lambda backend: ("the GPU", plain))
    world = SimpleNamespace(world_size=1)
    memory.check_memory(cfg, args, world, SimpleNamespace(name="cuda", deterministic=False),
                        "fp32", recompute="off")
    with pytest.raises(UserError, match="the run needs at least"):
        memory.check_memory(cfg, args, world, SimpleNamespace(name="cuda", deterministic=True),
                            "fp32", recompute="off")


@pytest.mark.parametrize("mode, words", [
    ("on", "the LayerNorms' and GELU's outputs recomputed in the backward"),
    ("gelu", ", GELU's output recomputed in the backward")])
def test_a_run_with_recompute_on_says_so(tiny, tmp_path, capsys, mode, words):
    status, log, _ = run_main([*tiny, "--steps", 2, "--recompute", mode,
                               "--out", tmp_path / "run"], capsys)
    assert status == 0
    assert words in log


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
    "bf16 on the cpu": (lambda d: ["--device", "cpu", "--precision", "bf16"],
                        "--precision bf16 needs the cuda backend"),
    "out is a device": (lambda d: ["--out", os.devnull], "is a character device, not a directory"),
    "out is a FIFO": (lambda d: ["--out", fifo(d / "fifo")], "is a FIFO, not a directory"),
    "data is a FIFO": (lambda d: ["--data", fifo(d / "fifo")], "is a FIFO; pass a UTF-8 text"),
    "warmup beyond the run": (lambda d: ["--warmup", "3"], "--warmup 3 is longer than the run"),
    "a batch beyond memory": (lambda d: ["--batch-size", "1000000000"],
                              "batches of 1,000,000,000 x 16 tokens) but this machine has"),
    "a model beyond memory": (lambda d: ["--d-model", "1000000"], "GiB available; pass a smaller"),
}


def fifo(path):
    os.mkfifo(path)
    return path


@pytest.mark.parametrize("case", BAD_INPUTS)
def test_bad_input(case, tiny, tmp_path, capsys):
    if case == "cuda on the cpu" and (cuda_available() or "NUMBA_ENABLE_CUDASIM" in os.environ):
        pytest.skip("cuda runs here (a GPU or the simulator); see test_cuda_without_a_gpu")
    make, message = BAD_INPUTS[case]
    out = tmp_path / "runs" / "run"     # a parent to create too, as the default runs/DATE
    status, stdout, err = run_main([*tiny, "--steps", 2, "--out", out, *make(tmp_path)], capsys)
    assert status == 2
    assert err.count("\n") == 1 and err.startswith("microgpt.train: error: ") and message in err
    assert not out.parent.exists(), "nothing left on disk, not even an empty runs/"


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
                                         ("--lr", "0"), ("--steps", "many"),
                                         ("--seed", "-1"), ("--grad-accum", "0"),
                                         ("--batch-tokens", "x"), ("--weight-decay", "-0.1"),
                                         ("--beta1", "1"), ("--beta2", "nan"), ("--eps", "0"),
                                         ("--grad-clip", "-1"), ("--grad-clip", "inf"),
                                         ("--min-lr-ratio", "1.5")])
def test_bad_numbers(flag, value, tiny, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        train.main([*tiny, flag, value, "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2
    assert err.count("\n") == 1 and flag in err and f"got {value}" in err
    assert "invalid" not in err                      # not argparse's "invalid int value"
    assert not (tmp_path / "run").exists()


def test_flags_are_taken_by_their_whole_names_only(tiny, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        train.main([*tiny, "--ste", "5", "--out", str(tmp_path / "run")])
    assert exit_info.value.code == 2 and "unrecognized arguments: --ste" in capsys.readouterr().err


@pytest.mark.parametrize("extra, message", [
    (["--batch-tokens", "100"], "not a whole number of micro-batches of --batch-size 4 x "
                                "context 16 = 64 tokens"),
    (["--batch-tokens", "128", "--grad-accum", "3"], "disagree"),
])
def test_bad_batch_tokens(extra, message, tiny, tmp_path, capsys):
    status, _, err = run_main([*tiny, *extra, "--out", tmp_path / "run"], capsys)
    assert status == 2 and err.count("\n") == 1 and message in err
    assert not (tmp_path / "run").exists()


def test_the_optimizer_flags_and_accumulation_are_the_runs_and_resume_keeps_them(
        tiny, tmp_path, capsys):
    """--batch-tokens becomes --grad-accum, the optimizer flags reach AdamW, the checkpoint
    keeps them all, and a resumed run takes them from it (another value is refused)."""
    out = tmp_path / "run"
    flags = ["--batch-tokens", "128", "--weight-decay", "0.05", "--beta1", "0.8", "--beta2",
             "0.99", "--eps", "1e-6", "--grad-clip", "0", "--min-lr-ratio", "0"]
    status, log, _ = run_main([*tiny, *flags, "--steps", 4, "--stop-at", 2, "--out", out], capsys)
    assert status == 0 and "run: 4 steps of 2 micro-batches of 4 x 16 tokens" in log
    args = load_checkpoint(out).state["args"]
    assert (args["grad_accum"], args["weight_decay"], args["beta1"], args["beta2"], args["eps"],
            args["grad_clip"], args["min_lr_ratio"]) == (2, 0.05, 0.8, 0.99, 1e-6, 0.0, 0.0)
    assert run_main(["--resume", out], capsys)[0] == 0
    assert load_checkpoint(out).state["step"] == 4 and load_checkpoint(out).state["args"] == args
    status, _, err = run_main(["--resume", out, "--steps", 6, "--beta1", "0.9"], capsys)
    assert status == 2 and "--beta1 0.9 differs from the checkpoint's beta1 (0.8)" in err


def test_a_config_file_sets_flags_and_the_command_line_wins(tiny, tmp_path, capsys):
    out = tmp_path / "run"
    config = tmp_path / "run.toml"
    config.write_text('steps = 3\nbatch-size = 2\nlr = 1e-2\nsample_every = 0\n')
    status, log, _ = run_main([*tiny, "--config-file", config, "--batch-size", 3,
                               "--out", out], capsys)
    assert status == 0
    args = load_checkpoint(out).state["args"]
    assert (args["steps"], args["batch_size"], args["lr"]) == (3, 3, 1e-2)


@pytest.mark.parametrize("text, message", [
    ("steps = 0\n", "steps must be a positive integer, got 0"),
    ("stepz = 3\n", "unknown option 'stepz'"),
    ("steps = [3]\n", "steps must be one value"),
    ("device = 'tpu'\n", "device must be one of auto, cpu, cuda"),
    ("steps = \n", "is not valid TOML"),
])
def test_a_bad_config_file(text, message, tiny, tmp_path, capsys):
    config = tmp_path / "run.toml"
    config.write_text(text)
    status, _, err = run_main([*tiny, "--config-file", config, "--out", tmp_path / "run"],
                              capsys)
    assert status == 2 and err.count("\n") == 1 and message in err
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
    (damage_state(lambda s: s["args"].update(batch_size="4")), [], "args.batch_size is '4'"),
    (damage_state(lambda s: s["args"].update(seed=-1)), [], "args.seed is -1"),
    (damage_state(lambda s: s.update(history={"train": [1.0], "val": []})), [],
     "a loss history of 1 steps at step 2"),
    (damage_state(lambda s: s["history"].update(val=[["x", 2.0]])), [], "state.json is damaged"),
    (damage_state(lambda s: s.update(format=2)), [], "format 2, from a newer microgpt"),
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
    progress = Progress(total_steps=10)
    progress.enqueued(1)                       # nothing read back yet: the step alone
    assert terminal.written == "\rstep 1/10\033[K"
    progress.enqueued(2)                       # within REDRAW_S: not redrawn
    assert terminal.written == "\rstep 1/10\033[K"
    progress.step(3, 2.5, 0.25)
    progress.log_step(3, 2.5, None, 1e-3, 0.5, tokens_per_step=1000)
    assert terminal.written.endswith("\r\033[K")                    # the live line is cleared
    progress.enqueued(4)                       # between log lines: drawn at once
    assert terminal.written.endswith("\rstep 4/10 | loss 2.5000 | 250 ms/step | eta 2s\033[K")
    assert capsys.readouterr().out == ("step  3/10 | loss 2.5000 | lr 1.00e-03 | norm 0.5000 | "
                                       "250 ms/step | 4,000 tok/s\n")


def test_sample_bad_checkpoint(tmp_path, capsys):
    assert sample.main(["--checkpoint", str(tmp_path / "nothing")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "does not exist" in err


# ----------------------------------------------------------------------------------
# faults: divergence, full disks, concurrent runs, changed data, killed processes

def test_the_issue_divergence_writes_nothing_and_says_it_once(tiny, tmp_path):
    """lr 1e4 with a checkpoint every 2 steps once kept a checkpoint at loss 1.75e17 after
    sixteen RuntimeWarning lines."""
    out = tmp_path / "run"
    result = python("-m", "microgpt.train", *tiny, "--tokenizer", "bytes", "--steps", "200",
                    "--lr", "1e4", "--checkpoint-every", "2", "--out", str(out))
    assert result.returncode == train.EXIT_DIVERGED
    assert result.stderr.count("\n") == 1 and "training diverged" in result.stderr
    assert "no checkpoint was written before it" in result.stderr
    assert not out.exists()


@pytest.mark.parametrize("blow_up_after, kept", [(3, "ckpt-000002"),    # the loss shows it
                                                 (4, "ckpt-000002")])   # the save's check does
def test_divergence_keeps_the_last_healthy_checkpoint(blow_up_after, kept, tiny, tmp_path,
                                                      capsys, monkeypatch):
    """Parameters that explode (finite, then overflowing) after a given step: the run stops
    with one line, the checkpoint before stays the latest, and NumPy says nothing."""
    run = Step.run

    def exploding_run(self, *args, **kwargs):
        run(self, *args, **kwargs)
        if self.optimizer.step_count == blow_up_after:
            self.model.params_flat *= np.float32(1e30)
    monkeypatch.setattr(Step, "run", exploding_run)
    out = tmp_path / "run"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        status, _, err = run_main([*tiny, "--steps", 8, "--checkpoint-every", 2,
                                   "--out", out], capsys)
    assert status == train.EXIT_DIVERGED
    assert err.count("\n") == 1 and "training diverged" in err and kept in err
    assert not [w for w in caught if issubclass(w.category, RuntimeWarning)]
    assert sorted(p.name for p in out.iterdir()) == [kept, LATEST, "loss.png", "metrics.jsonl"]
    assert load_checkpoint(out).state["step"] == 2


def test_a_full_disk_at_each_write(tiny, tmp_path, capsys, monkeypatch):
    """Every durable write (token cache, checkpoint files, latest, loss.png, samples.txt) ends
    in an fsync, where a full disk shows at the latest: fail each in turn. One line, status
    2, the last checkpoint whole, no temporary left, and the next run completes."""
    fsync, calls = os.fsync, []

    def full_disk_at(n):
        def sync(fd):
            calls.append(fd)
            if len(calls) == n:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            fsync(fd)
        return sync

    def attempt(n):
        calls.clear()
        out, cache = tmp_path / str(n) / "run", tmp_path / str(n) / "cache"
        args = [*tiny, "--tokenizer", "bytes", "--cache-dir", cache, "--steps", 2,
                "--checkpoint-every", 1, "--out", out]
        monkeypatch.setattr(os, "fsync", full_disk_at(n))
        status, _, err = run_main(args, capsys)
        monkeypatch.setattr(os, "fsync", fsync)
        return status, err, out, args

    assert attempt(0)[0] == 0
    writes = len(calls)
    assert writes > 10
    for n in range(1, writes + 1):
        status, err, out, args = attempt(n)
        assert status == 2 and err.count("\n") == 1 and "No space left on device" in err, n
        assert not [p for p in out.parent.rglob(".*") if p.name.endswith((".tmp", ".old"))], n
        if (out / LATEST).exists():
            resume = ["--resume", out, *args[args.index("--cache-dir"):][:2]]
            assert load_checkpoint(out).state["step"] in (1, 2)
        status, _, _ = run_main(resume if (out / LATEST).exists() else args, capsys)
        if status == 2:     # the failed run had saved its last step: nothing left to train
            assert load_checkpoint(out).state["step"] == 2
        else:
            assert status == 0 and load_checkpoint(out).state["step"] == 2, n


def test_loss_png_on_a_full_disk(tiny, tmp_path, capsys, monkeypatch):
    def full_disk(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    from matplotlib.figure import Figure      # what metrics.plot_losses draws with
    monkeypatch.setattr(Figure, "savefig", full_disk)
    out = tmp_path / "run"
    status, _, err = run_main([*tiny, "--steps", 2, "--out", out], capsys)
    assert status == 2 and err.count("\n") == 1
    assert f"cannot write {out / 'loss.png'} (No space left on device)" in err
    assert f"continue with --resume {out}" in err
    assert sorted(p.name for p in out.iterdir()) == ["ckpt-000002", LATEST, "metrics.jsonl"]


def test_a_locked_run_directory_is_refused(tiny, tmp_path, capsys):
    """Another run holds the directory (its lock stands in for it): refused, untouched."""
    out = tmp_path / "run"
    out.mkdir()
    fd = os.open(out, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        status, _, err = run_main([*tiny, "--steps", 2, "--out", out], capsys)
    finally:
        os.close(fd)
    assert status == 2 and err.count("\n") == 1 and "in use by another training run" in err
    assert list(out.iterdir()) == []


def test_the_default_run_name_does_not_collide(tiny, tmp_path, capsys, monkeypatch):
    """Two runs started in the same second: the second takes runs/NAME-2."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(microgpt.run, "default_out", lambda: Path("runs") / "20261129-230000")
    busy = tmp_path / "runs" / "20261129-230000"
    busy.mkdir(parents=True)
    fd = os.open(busy, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)                 # the first run, still training
        status, out, _ = run_main([*tiny, "--steps", 2], capsys)
    finally:
        os.close(fd)
    assert status == 0 and "out runs/20261129-230000-2" in out
    assert list(busy.iterdir()) == []
    assert load_checkpoint(busy.with_name("20261129-230000-2")).state["step"] == 2


def test_an_empty_run_directory_is_not_left_behind(tiny, tmp_path, capsys):
    out = tmp_path / "run"
    status, _, _ = run_main([*tiny, "--steps", 2, "--lr", 1e4, "--out", out], capsys)
    assert status == train.EXIT_DIVERGED and not out.exists()


def test_temporaries_of_killed_processes_are_removed(tiny, tmp_path, capsys):
    """kill -9 in the middle of a save leaves hidden temporaries; the next run removes them
    (in the cache only those of processes that have ended: a live one is still writing)."""
    out, cache = tmp_path / "run", tmp_path / "cache"
    args = [*tiny, "--cache-dir", cache]
    assert run_main([*args, "--steps", 4, "--stop-at", 2, "--out", out], capsys)[0] == 0
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                           capture_output=True, text=True).stdout.strip()
    host = socket.gethostname()
    stale = [out / f".ckpt-000004~{ended}@{host}.tmp",
             out / ".ckpt-000003.99.tmp",                # the naming of earlier versions
             cache / "tokens" / f".0123abcd~{ended}@{host}.tmp"]
    live = cache / "tokens" / f".4567cdef~{os.getpid()}@{host}.tmp"
    for directory in [*stale, live]:
        directory.mkdir()
    stale.append(out / f".latest~{ended}@{host}.tmp")
    stale[-1].touch()
    assert run_main(["--resume", out, "--cache-dir", cache], capsys)[0] == 0
    assert not any(p.exists() for p in stale) and live.exists()


def test_resume_refuses_changed_data(tmp_path, cache, capsys):
    data = tmp_path / "data.txt"
    data.write_text("".join(f"line {i} of the first corpus\n" for i in range(400)))
    out = tmp_path / "run"
    args = ["--config", "microgpt", "--data", data, "--tokenizer", "bytes", "--cache-dir", cache,
            "--batch-size", 2, "--eval-batches", 1, "--steps", 4]
    assert run_main([*args, "--stop-at", 2, "--out", out], capsys)[0] == 0
    data.write_text("".join(f"line {i} of another corpus\n" for i in range(400)))
    status, _, err = run_main(["--resume", out, "--cache-dir", cache], capsys)
    assert status == 2 and err.count("\n") == 1 and "the data changed" in err
    assert load_checkpoint(out).state["step"] == 2


def test_resuming_a_default_run_names_the_default(corpus, cache, tmp_path, capsys):
    out = tmp_path / "run"
    assert run_main(["--data", corpus, "--cache-dir", cache, "--tokenizer", "bytes", "--steps",
                     2, "--batch-size", 1, "--eval-batches", 1, "--sample-every", 0,
                     "--stop-at", 1, "--out", out], capsys)[0] == 0
    status, _, err = run_main(["--resume", out, "--config", "microgpt"], capsys)
    assert status == 2 and err.count("\n") == 1 and "None" not in err
    assert "--config microgpt differs from the checkpoint's config (microgpt-cpu)" in err


def test_a_file_name_that_is_not_utf8(tmp_path, cache, capsys):
    name = os.fsdecode(b"doc-\xff\xfe.py")
    try:
        (tmp_path / "c").mkdir()
        (tmp_path / "c" / name).write_text(" ".join(["def f(x):\n    return x"] * 300))
    except (OSError, UnicodeError):
        pytest.skip("this file system takes UTF-8 names only")
    status, out, err = run_main(["--config", "microgpt", "--data", tmp_path / "c", "--tokenizer",
                                 "bytes", "--cache-dir", cache, "--steps", 2, "--batch-size", 2,
                                 "--eval-batches", 1, "--out", tmp_path / "run"], capsys)
    assert status == 0, err
    assert load_checkpoint(tmp_path / "run").state["step"] == 2


def test_numba_performance_advice_stays_out_of_the_log(tiny, tmp_path, capsys, monkeypatch):
    """numba warns about small grids (the microgpt config's, on the GPU) at every new launch
    shape; the trainer keeps that out of the user's log."""
    forward_backward = GPT.forward_backward

    def advised(self, *args):
        warnings.warn("Grid size 1 will likely result in GPU under-utilization due to low "
                      "occupancy.", UserWarning)
        return forward_backward(self, *args)
    monkeypatch.setattr(GPT, "forward_backward", advised)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        status, _, _ = run_main([*tiny, "--steps", 2, "--out", tmp_path / "run"], capsys)
    assert status == 0 and not caught


def test_cuda_says_it_compiles_before_the_first_step(tiny, tmp_path, capsys, monkeypatch):
    """The first cuda step compiles every kernel (seconds) or loads it from the disk cache:
    the log says so first, and how many of each before the first step's line. The numpy
    backend stands in for cuda, whose steps the simulator runs too slowly."""
    monkeypatch.setattr(NumpyBackend, "name", "cuda")
    status, out, _ = run_main([*tiny, "--steps", 2, "--out", tmp_path / "run"], capsys)
    lines = out.splitlines()
    assert status == 0
    first_step = min(i for i, line in enumerate(lines) if line.startswith("step "))
    told = [i for i, line in enumerate(lines) if line.startswith("kernels: ")]
    assert len(told) == 2 and told[1] < first_step
    assert lines[told[0]].startswith("kernels: compiling, or loading from the cache in ")
    assert "ready (0 compiled, 0 from the cache) in " in lines[told[1]]


# ----------------------------------------------------------------------------------
# sampling

@pytest.fixture(scope="module")
def trained_run(tmp_path_factory, corpus, cache):
    out = tmp_path_factory.mktemp("trained") / "run"
    assert train.main(["--config", "microgpt", "--data", str(corpus), "--cache-dir", str(cache),
                       "--steps", "2", "--batch-size", "2", "--eval-batches", "1",
                       "--out", str(out)]) == 0
    return out


@pytest.mark.parametrize("argv, message", [
    (["--seed", "-1"], "argument --seed: must be an integer >= 0"),
    (["--temperature", "nan"], "argument --temperature: must be a finite number >= 0"),
    (["--temperature", "inf"], "argument --temperature: must be a finite number >= 0"),
    (["--prompt", os.fsdecode(b"def \xff\xfe")], "--prompt is not UTF-8 text (byte 0xff at"),
])
def test_sample_bad_arguments(argv, message, trained_run, capsys):
    with pytest.raises(SystemExit) as exit_info:
        sample.main(["--checkpoint", str(trained_run), *argv])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1 and message in err


def test_sample_help_shows_the_defaults(capsys):
    with pytest.raises(SystemExit):
        sample.main(["--help"])
    out = " ".join(capsys.readouterr().out.split())
    for default in ("(default: 200)", "(default: 0.8)", "(default: 40)", "(default: 0)",
                    "(default: auto)"):
        assert default in out


def test_sample_needs_no_optimizer_state(trained_run, tmp_path, capsys):
    copy = tmp_path / "ckpt"
    shutil.copytree(load_checkpoint(trained_run).path, copy)
    (copy / OPTIMIZER_FILE).unlink()
    assert sample.main(["--checkpoint", str(copy), "--tokens", "5"]) == 0


@pytest.mark.parametrize("value, message", [(np.nan, "holds NaN or infinity (in wte)"),
                                            (3e38, "outputs overflow to NaN or infinity")])
def test_sample_refuses_a_diverged_checkpoint(value, message, trained_run, tmp_path, capsys):
    from safetensors.numpy import load_file, save_file
    copy = tmp_path / "ckpt"
    shutil.copytree(load_checkpoint(trained_run).path, copy)
    tensors = load_file(copy / "model.safetensors")
    tensors["wte"][:] = value
    save_file(tensors, copy / "model.safetensors")
    assert sample.main(["--checkpoint", str(copy), "--tokens", "5"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err


# ----------------------------------------------------------------------------------
# data parallel

def mpiexec():
    found = (shutil.which("mpiexec")
             or shutil.which("mpiexec", path=str(Path(sys.executable).parent)))
    if not found:
        pytest.fail("mpiexec not found: install the test extra (pip install '.[test]')")
    return found


def test_ranks_that_disagree_on_the_data_are_refused(tmp_path, cache):
    """Two ranks given different corpora would average gradients of different batches."""
    flags = ["--config", "microgpt", "--tokenizer", "bytes", "--steps", "2", "--batch-size",
             "2", "--eval-batches", "1", "--cache-dir", str(cache), "--out", str(tmp_path / "run")]
    for name in ("a.txt", "b.txt"):
        (tmp_path / name).write_text(f"{name} holds text\n" * 200)
    rank = [sys.executable, "-m", "microgpt.train", *flags, "--data"]
    result = subprocess.run([mpiexec(), "-n", "1", *rank, str(tmp_path / "a.txt"), ":",
                             "-n", "1", *rank, str(tmp_path / "b.txt")],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode != 0
    assert "rank 1 has other arguments than rank 0 (--data" in result.stderr
    assert result.stderr.count("microgpt.train: error:") == 1
    assert not (tmp_path / "run").exists()


def test_a_rank_that_fails_alone_fails_every_rank(tmp_path, cache):
    """Rank 1 cannot write its cache while rank 0 has gone on: rank 0 must not wait for
    rank 1 forever, and says what went wrong there."""
    (tmp_path / "data.txt").write_text("some text to train on\n" * 200)
    (tmp_path / "file").write_text("")
    rank = [sys.executable, "-m", "microgpt.train", "--config", "microgpt", "--tokenizer",
            "bytes", "--data", str(tmp_path / "data.txt"), "--steps", "2", "--batch-size", "2",
            "--eval-batches", "1", "--out", str(tmp_path / "run"), "--cache-dir"]
    result = subprocess.run([mpiexec(), "-n", "1", *rank, str(tmp_path / "cache"), ":",
                             "-n", "1", *rank, str(tmp_path / "file" / "cache")],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert result.stderr.count("error") == 1
    assert "microgpt.train: error: rank 1: cannot write the cache" in result.stderr
    assert not (tmp_path / "run").exists()
