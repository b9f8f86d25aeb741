"""Data parallelism, plain and ZeRO-1: 2 MPI ranks against one process with the same global
batch (on the CPU; on two GPUs in the gpu profile), through the library and the trainer, on
one host and as if on two; checkpoints resumed at another world size; the ranges the
backward hands to the all-reduce, and the shards of ZeRO-1."""

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
from microgpt.memory import required_bytes
from microgpt.params import ParamLayout
from microgpt.zero import ALIGN, Shards

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


@pytest.mark.parametrize("zero", [0, 1], ids=["all-reduce", "zero-1"])
@pytest.mark.parametrize("backend", [
    "numpy",
    pytest.param("cuda", marks=pytest.mark.skipif(
        gpus() < 2, reason="NCCL between two ranks needs two GPUs (MICROGPT_TEST_DEVICE=gpu)"))])
def test_two_ranks_match_one_process(tmp_path, backend, zero):
    """Three steps through Step with the world's gradient sync (zero 1: ZeRO-1's sharded
    one and ShardedAdamW); on cuda the first is eager, the second captured with its NCCL
    calls, the third replayed. The ranks hold identical parameters, those of one process
    on the numpy backend with the same global batch, and rank 0 the whole moments and the
    gradient norms of that process (under ZeRO-1 the moments gathered from the shards, the
    norm added from theirs): to 1e-5 on numpy (the sum's order
    differs), to the whole-model float32 tolerance on cuda (the kernels' rounding too; one
    numpy process spares a third compile of the kernels)."""
    env = {**os.environ,
           "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}
    subprocess.run([mpiexec(), "-n", "2", sys.executable, str(TESTS / "dp_worker.py"),
                    str(tmp_path), backend, str(WORKER_SECONDS), str(zero)],
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
    state, one_state = np.load(tmp_path / "optimizer.npz"), np.load(single / "optimizer.npz")
    for name in ("m", "v", "grad_norm"):
        assert rel_error(state[name], one_state[name]) < tolerance, name
        assert np.count_nonzero(one_state[name]) > one_state[name].size // 2, name


def test_zero_1_nccl_collectives_in_the_simulator(tmp_path):
    """The cuda backend's ZeRO-1 collectives (NCCLWorld's sharded sync: the backward's
    ranges reduced to their owners, the norm's total, the parameters' and the bf16 copy's
    gather), 3 ranks as if on three hosts, in the CUDA simulator with NCCL's calls done by
    their twin over MPI (tests/nccl_twin.py): each rank checks its buffers against what
    NCCL leaves there (tests/nccl_worker.py)."""
    env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "1",
           "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}
    run = subprocess.run([mpiexec(), *separate_hosts(tmp_path, 3), "-n", "3", sys.executable,
                          str(TESTS / "nccl_worker.py")],
                         capture_output=True, text=True, env=env, timeout=WORKER_SECONDS)
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.count("every collective as NCCL's") == 3


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


def trainer_flags(folder):
    return ["--steps", "4", "--batch-size", "4", "--eval-every", "2", "--log-every", "1",
            "--sample-every", "0", "--cache-dir", str(folder / "cache")]


def logged_losses(log):
    """{step: the loss as logged} of a trainer's output."""
    lines = [line.split("|")[:2] for line in log.splitlines() if line.startswith("step ")]
    return {int(step.split()[1].split("/")[0]): loss for step, loss in lines}


def assert_same_run(folder, one):
    """The run in folder/run ended where the one process's did: its checkpoint's parameters
    and moments those of one's to 1e-5 (the sums' order differs)."""
    from safetensors.numpy import load_file
    for file in ("model.safetensors", "optimizer.safetensors"):
        ours = load_file(str(folder / "run" / "ckpt-000004" / file))
        theirs = load_file(str(one.folder / "run" / "ckpt-000004" / file))
        assert ours.keys() == theirs.keys()
        for name in theirs:
            assert rel_error(ours[name], theirs[name]) < 1e-5, (file, name)


class Trained:
    def __init__(self, folder, log):
        self.folder, self.log = folder, log


@pytest.fixture(scope="module")
def one_process(tmp_path_factory):
    """The trainer in one process, 4 steps: what every data-parallel run must equal."""
    folder = tmp_path_factory.mktemp("one")
    run = subprocess.run(train_command(text(folder), *trainer_flags(folder), "--out",
                                       str(folder / "run")),
                         capture_output=True, text=True, timeout=300, check=True)
    assert sorted(logged_losses(run.stdout)) == [1, 2, 3, 4]
    return Trained(folder, run.stdout)


def separate_hosts(folder, ranks):
    """mpiexec's flags that start `ranks` ranks (at most 3) as if each were on a host of its
    own: a host file naming this machine by other names, one slot each (Hydra, the mpich
    wheel's mpiexec, then takes each for a host: local rank 0 on every one), started
    without ssh."""
    version = subprocess.run([mpiexec(), "--version"], capture_output=True, text=True).stdout
    if "HYDRA" not in version:
        pytest.skip("the multi-host launch is written for Hydra's mpiexec (the mpich wheel "
                    "of the test extra); this mpiexec is another")
    hosts = folder / "hosts"
    hosts.write_text("".join(f"{name}:1\n" for name in
                             ("localhost", "127.0.0.1", "127.0.0.2")[:ranks]))
    return ["-launcher", "fork", "-f", str(hosts)]


@pytest.mark.parametrize("zero, multi_host", [(0, False), (1, True)],
                         ids=["all-reduce, one host", "zero-1, two hosts"])
def test_mpirun_trainer_matches_one_process(tmp_path, one_process, zero, multi_host):
    """`mpirun -n 2 python -m microgpt.train` logs the same losses and writes the same
    checkpoint (rank 0's: the parameters, and under --zero 1 the moments gathered from the
    shards) as one process with the same global batch; on one host, and on two (a
    multi-host launch, each rank the first of its host)."""
    launch = separate_hosts(tmp_path, 2) if multi_host else []
    parallel = subprocess.run([mpiexec(), *launch, "-n", "2", *train_command(
                                  text(tmp_path), *trainer_flags(tmp_path), "--zero", str(zero),
                                  "--out", str(tmp_path / "run"))],
                              capture_output=True, text=True, timeout=300, check=True)
    hosts = "2 hosts" if multi_host else "1 host"
    assert f"data parallel: 2 ranks on {hosts}, 2 sequences each per step" in parallel.stdout
    assert ("(ZeRO-1)" in parallel.stdout) == bool(zero)
    assert logged_losses(parallel.stdout) == logged_losses(one_process.log)
    assert_same_run(tmp_path, one_process)


@pytest.mark.parametrize("first, then", [(2, 1), (1, 2)], ids=["2 ranks to 1", "1 to 2 ranks"])
def test_a_checkpoint_resumes_at_another_world_size(tmp_path, one_process, first, then):
    """A run stopped at step 2 by one world (2 ranks with --zero 1, or one process) and
    resumed by the other ends as the one process's uninterrupted run: the same losses
    logged for steps 3 and 4, the same parameters and moments. The checkpoint holds the
    whole moments whichever wrote it, and each rank of the resumed run takes its shard."""
    def launch(ranks, *flags):
        mpi = [mpiexec(), "-n", str(ranks)] if ranks > 1 else []
        zero = ["--zero", "1"] if ranks > 1 else []
        return subprocess.run([*mpi, *train_command(text(tmp_path), *flags), *zero],
                              capture_output=True, text=True, timeout=300, check=True)
    out = tmp_path / "run"
    launch(first, *trainer_flags(tmp_path), "--stop-at", "2", "--out", str(out))
    resumed = launch(then, "--resume", str(out))
    assert f"resuming {out / 'ckpt-000002'} at step 2" in resumed.stdout
    want = logged_losses(one_process.log)
    assert logged_losses(resumed.stdout) == {step: want[step] for step in (3, 4)}
    assert_same_run(tmp_path, one_process)


def test_batch_must_divide_among_ranks(tmp_path):
    run = subprocess.run([mpiexec(), "-n", "2", *train_command(
                             text(tmp_path), "--batch-size", "3", "--out", str(tmp_path / "out"))],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode != 0
    assert "--batch-size 3 (the global batch) must divide among 2 ranks" in run.stderr
    assert not (tmp_path / "out").exists()


def test_ranks_that_disagree_on_zero_are_refused(tmp_path):
    """A rank that shards and one that does not would wait in different collectives."""
    rank = train_command(text(tmp_path), "--batch-size", "2", "--out", str(tmp_path / "out"))
    run = subprocess.run([mpiexec(), "-n", "1", *rank, "--zero", "1", ":", "-n", "1", *rank],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 2
    assert "rank 1 has other arguments than rank 0 (--zero 0 against 1)" in run.stderr
    assert run.stderr.count("error:") == 1
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
    assert tuple(model.layout.rows("wte")) in [(lo, hi) for lo, hi, _ in ranges]   # one range
    for lo, hi, announced in ranges:
        np.testing.assert_array_equal(announced, model.grads_flat[lo:hi],
                                      err_msg=f"range [{lo}, {hi}) changed after it was ready")
    for name, grad in model.grads.items():
        assert np.count_nonzero(grad) > grad.size // 2, name


@pytest.mark.parametrize("n, world_size", [(7520, 2), (7520, 3), (100, 8), (64, 2), (1, 4)])
def test_shards_tile_the_buffer_aligned_and_cut_ranges_by_owner(n, world_size):
    """Every element has one owner; the bounds but n are multiples of ALIGN, and the
    shards are as even as that allows; a range's pieces are cut where the shards meet."""
    shards = [Shards(n, world_size, r) for r in range(world_size)]
    spans = [s.span() for s in shards]
    assert spans[0][0] == 0 and spans[-1][1] == n
    assert all(a[1] == b[0] for a, b in zip(spans, spans[1:]))
    assert all(lo % ALIGN == 0 or lo == n for lo, _ in spans)
    assert max(hi - lo for lo, hi in spans) <= -(-n // world_size) + ALIGN
    rng = np.random.default_rng(n + world_size)
    for lo, hi in sorted(rng.integers(0, n + 1, (20, 2)).tolist()):
        pieces = shards[0].owners(lo, min(hi + 1, n))
        covered = [i for _, a, b in pieces for i in range(a, b)]
        assert covered == list(range(lo, min(hi + 1, n)))
        for root, a, b in pieces:
            assert spans[root][0] <= a < b <= spans[root][1]


def test_zero_1_needs_a_world_size_th_of_the_moments():
    cfg = get_config("andrea-12m")
    plain, sharded = (required_bytes(cfg, 4, "fp32", 1, shards) for shards in (1, 8))
    size = ParamLayout(cfg).size
    assert plain - sharded == 8 * size - 8 * -(-size // 8)
