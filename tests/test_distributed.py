"""Data parallelism: 2 MPI ranks against one process with the same global batch (on the
CPU; on two GPUs in the gpu profile), and the ranges the backward hands to the all-reduce."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import ON_GPU, TOL_F32_MODEL, rel_error

import dp_worker
from microgpt import GPT, distributed, get_config
from microgpt.model import HEAD_DW_PARTS, row_ranges

TESTS = Path(__file__).parent
# a rank still running after this long dumps its threads' stacks and exits (dp_worker.py);
# on two H200s each rank ended its three steps, the first compiling every float32 kernel,
# 11-14 s after its start
WORKER_SECONDS = 120


def mpiexec():
    found = (shutil.which("mpiexec")
             or shutil.which("mpiexec", path=str(Path(sys.executable).parent)))
    if not found:
        pytest.fail("mpiexec not found: install the test extra (pip install '.[test]', which "
                    "brings mpi4py and the mpich wheel)")
    return found


def gpus():
    from numba import cuda
    return len(cuda.gpus) if ON_GPU else 0


@pytest.mark.parametrize("backend", [
    "numpy",
    pytest.param("cuda", marks=pytest.mark.skipif(
        gpus() < 2, reason="NCCL between two ranks needs two GPUs (MICROGPT_TEST_DEVICE=gpu)"))])
def test_two_ranks_match_one_process(tmp_path, backend):
    """Three steps through Step with the world's gradient sync; on cuda the first is eager,
    the second captured with its NCCL calls, the third replayed. The ranks hold identical
    parameters, those of one process on the numpy backend with the same global batch: to
    1e-5 on numpy (the sum's order differs), to the whole-model float32 tolerance on cuda
    (the kernels' rounding too; one numpy process spares a third compile of the kernels)."""
    env = {**os.environ,
           "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}
    subprocess.run([mpiexec(), "-n", "2", sys.executable, str(TESTS / "dp_worker.py"),
                    str(tmp_path), backend, str(WORKER_SECONDS)],
                   check=True, env=env, timeout=WORKER_SECONDS + 60)
    single = tmp_path / "single"
    single.mkdir()
    dp_worker.train(distributed.SingleProcess(), str(single), "numpy")

    rank0, rank1 = np.load(tmp_path / "params-0.npz"), np.load(tmp_path / "params-1.npz")
    one = np.load(single / "params-0.npz")
    tolerance = 1e-5 if backend == "numpy" else TOL_F32_MODEL
    for name in one.files:
        np.testing.assert_array_equal(rank0[name], rank1[name], err_msg=f"ranks differ on {name}")
        assert rel_error(rank0[name], one[name]) < tolerance, name
        assert not np.array_equal(one[name], 0)


def test_single_process_outside_mpirun(monkeypatch):
    for var in ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS"):
        monkeypatch.delenv(var, raising=False)
    world = distributed.init("numpy")
    assert (world.rank, world.world_size) == (0, 1)


def train_command(data, *flags):
    """python -m microgpt.train on the tiny config with byte tokens of the text in data."""
    return [sys.executable, "-m", "microgpt.train", "--config", "microgpt", "--tokenizer",
            "bytes", "--data", str(data), *flags]


def text(folder):
    """A text of 6,000 bytes, the same on every run: words of random lowercase letters.
    (Not this file's own bytes, which an edit of a comment would change, and with them
    every gradient, and whether the runs' rounding stays within the tolerance.)"""
    rng = np.random.default_rng(0)
    letters = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz", np.uint8)
    data = letters[rng.integers(0, 26, 6000)]
    data[rng.random(6000) < 0.18] = ord(" ")
    path = folder / "text.txt"
    path.write_bytes(data.tobytes())
    return path


def test_mpirun_trainer_matches_one_process(tmp_path):
    """`mpirun -n 2 python -m microgpt.train` logs the same losses and writes the same
    parameters (rank 0's checkpoint) as one process with the same global batch."""
    from safetensors.numpy import load_file

    flags = ["--steps", "4", "--batch-size", "4", "--eval-every", "2", "--log-every", "1",
             "--sample-every", "0", "--cache-dir", str(tmp_path / "cache")]
    data = text(tmp_path)
    single = subprocess.run(train_command(data, *flags, "--out", str(tmp_path / "one")),
                            capture_output=True, text=True, timeout=300, check=True)
    parallel = subprocess.run([mpiexec(), "-n", "2", *train_command(
                                  data, *flags, "--out", str(tmp_path / "two"))],
                              capture_output=True, text=True, timeout=300, check=True)
    assert "data parallel: 2 ranks, 2 sequences each" in parallel.stdout

    def losses(log):
        return [line.split("|")[1] for line in log.splitlines() if line.startswith("step ")]

    assert losses(parallel.stdout) == losses(single.stdout) and len(losses(single.stdout)) == 4
    one = load_file(str(tmp_path / "one" / "ckpt-000004" / "model.safetensors"))
    two = load_file(str(tmp_path / "two" / "ckpt-000004" / "model.safetensors"))
    for name in one:
        assert rel_error(two[name], one[name]) < 1e-5, name


def test_batch_must_divide_among_ranks(tmp_path):
    run = subprocess.run([mpiexec(), "-n", "2", *train_command(
                             text(tmp_path), "--batch-size", "3", "--out", str(tmp_path / "out"))],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode != 0
    assert "--batch-size 3 (the global batch) must divide among 2 ranks" in run.stderr
    assert not (tmp_path / "out").exists()


class Recorder:
    """A gradient sync that keeps a copy of each range when it is announced."""

    def __init__(self, grads):
        self.grads, self.ranges, self.finished = grads, [], 0

    def ready(self, lo, hi):
        assert not self.finished, "a range announced after finish()"
        self.ranges.append((lo, hi, self.grads[lo:hi].copy()))

    def finish(self):
        self.finished += 1


def test_backward_announces_every_gradient_once_when_final():
    """The ranges the backward hands to the all-reduce tile the flat gradient (a range
    missed or announced twice would leave a gradient unaveraged or averaged twice), each
    announced with its final values (the numpy backend computes synchronously: a range
    announced before a later launch writes it differs from the gradient at the end), and
    finish() once, last."""
    cfg = get_config("microgpt", vocab_size=24, n_layer=3, d_model=16, n_head=2, context=8)
    model = GPT(cfg, seed=4)
    rng = np.random.default_rng(7)
    tokens, targets = (rng.integers(0, cfg.vocab_size, (2, 8)) for _ in range(2))
    recorder = Recorder(model.grads_flat)
    model.forward_backward(tokens, targets, sync=recorder)
    assert recorder.finished == 1
    ranges = sorted(recorder.ranges, key=lambda r: r[0])
    assert [lo for lo, _, _ in ranges] == [0] + [hi for _, hi, _ in ranges[:-1]]
    assert ranges[-1][1] == model.layout.size
    wte = model.layout.rows("wte")      # the tied head's dW, in parts (model.row_ranges)
    assert sum(wte[0] <= lo < wte[1] for lo, _, _ in ranges) == len(
        row_ranges(cfg.vocab_size, HEAD_DW_PARTS)) > 1
    for lo, hi, announced in ranges:
        np.testing.assert_array_equal(announced, model.grads_flat[lo:hi],
                                      err_msg=f"range [{lo}, {hi}) changed after it was ready")
    for name, grad in model.grads.items():
        assert np.count_nonzero(grad) > grad.size // 2, name
