"""Data parallelism on the CPU: 2 MPI ranks against one process with the same global batch."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import ON_GPU, rel_error

import dp_worker
from microgpt import distributed

TESTS = Path(__file__).parent


def mpiexec():
    found = (shutil.which("mpiexec")
             or shutil.which("mpiexec", path=str(Path(sys.executable).parent)))
    if not found:
        pytest.fail("mpiexec not found: install the test extra (pip install '.[test]', which "
                    "brings mpi4py and the mpich wheel)")
    return found


def test_two_ranks_match_one_process(tmp_path):
    env = {**os.environ,
           "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}
    subprocess.run([mpiexec(), "-n", "2", sys.executable, str(TESTS / "dp_worker.py"),
                    str(tmp_path)], check=True, env=env, timeout=300)
    single = tmp_path / "single"
    single.mkdir()
    dp_worker.train(distributed.SingleProcess(), str(single))

    rank0, rank1 = np.load(tmp_path / "params-0.npz"), np.load(tmp_path / "params-1.npz")
    one = np.load(single / "params-0.npz")
    for name in one.files:
        np.testing.assert_array_equal(rank0[name], rank1[name], err_msg=f"ranks differ on {name}")
        assert rel_error(rank0[name], one[name]) < 1e-5, name
        assert not np.array_equal(one[name], 0)


def test_single_process_outside_mpirun(monkeypatch):
    for var in ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS"):
        monkeypatch.delenv(var, raising=False)
    world = distributed.init("numpy")
    assert (world.rank, world.world_size) == (0, 1)


def train_command(*flags):
    """python -m microgpt.train on the tiny config with byte tokens of this file."""
    return [sys.executable, "-m", "microgpt.train", "--config", "microgpt", "--tokenizer",
            "bytes", "--data", str(Path(__file__)), *flags]


def test_mpirun_trainer_matches_one_process(tmp_path):
    """`mpirun -n 2 python -m microgpt.train` logs the same losses and writes the same
    parameters (rank 0's checkpoint) as one process with the same global batch."""
    from safetensors.numpy import load_file

    flags = ["--steps", "4", "--batch-size", "4", "--eval-every", "2", "--log-every", "1",
             "--sample-every", "0", "--cache-dir", str(tmp_path / "cache")]
    single = subprocess.run(train_command(*flags, "--out", str(tmp_path / "one")),
                            capture_output=True, text=True, timeout=300, check=True)
    parallel = subprocess.run([mpiexec(), "-n", "2", *train_command(*flags, "--out",
                                                                    str(tmp_path / "two"))],
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
                             "--batch-size", "3", "--out", str(tmp_path / "out"))],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode != 0
    assert "--batch-size 3 (the global batch) must divide among 2 ranks" in run.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.skipif(not ON_GPU, reason="NCCL needs a GPU (MICROGPT_TEST_DEVICE=gpu)")
def test_nccl_world_averages_a_device_buffer():
    """One rank (all a one-GPU machine allows): the gradient buffer goes through NCCL by
    its device pointer on the backend's stream and comes back as the mean, unchanged."""
    from mpi4py import MPI

    from microgpt.cuda_backend import CudaBackend

    ops = CudaBackend()
    world = distributed.NCCLWorld(MPI.COMM_WORLD)
    host = np.random.default_rng(0).standard_normal(1 << 20).astype(np.float32)
    flat = ops.to_device(host)
    world.allreduce_mean(flat, ops)
    np.testing.assert_array_equal(ops.to_host(flat), host)
    assert world.mean(2.5) == 2.5 and world.any(True) and not world.any(False)
