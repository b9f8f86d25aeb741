"""A first run's kernels, found by recording its step (kernels/ahead.py) instead of
compiling them one after another in it.

The recording runs the step's host code with every launch listed and nothing run; what
it lists must be what the step then launches for real, the same kernels with the same
argument types (the manifest a first run writes). In the simulator (CI) the tiny config
in fp32; on a GPU (MICROGPT_TEST_DEVICE=gpu) a small bf16 model, whose tensor-core
kernels ask for their compiled overload in the host code (the shared-memory opt-in),
and whose step then runs (a host-side memo of work that the recording skipped fails it)."""
import dataclasses
import pickle

import numpy as np
import pytest
from helpers import ON_GPU

from microgpt import GPT, get_config
from microgpt.cuda_backend import CudaBackend
from microgpt.kernels import ahead, cache
from microgpt.optim import AdamW, AdamWConfig
from microgpt.step import Step

if ON_GPU:      # T 1024: the Hopper attention's (its own memo of the shared-memory opt-in)
    CONFIG, PRECISION, B, T = dict(n_layer=1, d_model=128, n_head=2, context=1024,
                                   vocab_size=512), "bf16", 1, 1024
else:
    CONFIG, PRECISION, B, T = dict(vocab_size=24), "fp32", 1, 4


def fresh_step(seed):
    config = get_config("microgpt", **CONFIG)
    model = GPT(config, backend=CudaBackend(), seed=seed, precision=PRECISION)
    return Step(model, AdamW(model, AdamWConfig(lr=1e-3)), B, T, graph=False)


def launched(step, tokens, monkeypatch, tmp_path, recorded):
    """The jobs (recipe, argument types) of the kernels that one real run of step launches:
    on a GPU those the manifest lists (the cache's record of what was compiled or loaded;
    and those of recorded that this process compiled before, which it does not load
    again), in the simulator each launch's, as the simulator runs it."""
    if ON_GPU:
        if cache._settings.directory is None:       # (else the tests' cache: loads count)
            monkeypatch.setattr(cache, "_settings", cache._Settings(directory=tmp_path))
        monkeypatch.setattr(cache, "_used", {})
        before = {(recipe, sig) for recipe, sig in recorded
                  if sig in cache.make(recipe).overloads}
        step.run(tokens, tokens)
        step.backend.synchronize()
        return before | {(recipe, tuple(sig)) for recipe, sig, _ in cache._used.values()}
    import numba
    from numba.cuda.simulator import kernel as simulated

    jobs, run = set(), simulated.FakeCUDAKernel.__call__

    def logged(kernel, *args):
        if not (kernel._device or simulated._kernel_context):
            jobs.add((kernel.microgpt_recipe, tuple(numba.typeof(arg) for arg in args)))
        return run(kernel, *args)
    monkeypatch.setattr(simulated.FakeCUDAKernel, "__call__", logged)
    step.run(tokens, tokens)
    return jobs


def test_the_recording_lists_the_kernels_that_the_step_then_launches(monkeypatch, tmp_path):
    rng = np.random.default_rng()
    step = fresh_step(int(rng.integers(1 << 30)))
    # every buffer that a kernel of the step writes (the gradient and dresid are zeroed by
    # a memset, the host's part of the step), which a kernel run by the recording changes
    arrays = [step.model.params_flat, step.optimizer.m, step.optimizer.v,
              step.optimizer.hparams, step.optimizer.norm_squared]
    arrays += [buf for name, buf in step.buffers.arrays() if name != "dresid"]
    for arr in arrays:
        step.backend.copy(arr, rng.integers(0, 1 << 14, arr.shape).astype(arr.dtype))
    before = [step.backend.to_host(arr) for arr in arrays]
    recorded = ahead.record(step.accumulate, step.update)
    for arr, was in zip(arrays, before):
        np.testing.assert_array_equal(step.backend.to_host(arr), was)
    assert len(recorded) == len(set(recorded)) > 10
    assert all(recipe is not None for recipe, _ in recorded)
    tokens = rng.integers(0, CONFIG["vocab_size"], (B, T))
    assert launched(step, tokens, monkeypatch, tmp_path, recorded) == set(recorded)


class _Compilers:
    """start_compiling's, as the trainer's set-up sees it: what it was handed, and when."""

    def __init__(self, tokens_made):
        self.tokens_made, self.handed, self.waited = tokens_made, None, []

    def hand(self, jobs, log=print):
        self.handed, self.handed_after_tokens = jobs, bool(self.tokens_made)

    def wait(self, manifest):
        self.waited.append(manifest)


def _set_up(tmp_path, out, monkeypatch):
    """The trainer's set-up of a tiny run on the cuda backend, its cache in tmp_path, with
    stand-in compilers -> (run, compilers)."""
    import contextlib

    from microgpt import distributed, run
    from microgpt.cli import backend_for, make_backend
    from microgpt.train_args import parse_args

    # the set-up turns the cache on (kernels.cache.use) in its directory: for this test only
    monkeypatch.setattr(cache, "_settings", dataclasses.replace(cache._settings))
    made = []
    load_tokens = run.load_tokens
    monkeypatch.setattr(run, "load_tokens", lambda *a: made.append(1) or load_tokens(*a))
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("the quick brown fox jumps over the lazy dog\n" * 40)
    ns = parse_args(["--device", "cuda", "--config", "microgpt", "--tokenizer", "bytes",
                     "--data", str(corpus), "--batch-size", "1", "--steps", "2",
                     "--cache-dir", str(tmp_path / "cache"), "--out", str(tmp_path / out)])
    compilers = _Compilers(made)
    with contextlib.ExitStack() as resources:
        world = distributed.init(backend_for(ns.device))
        return run.setup(ns, world, make_backend(ns.device, False), resources,
                         compilers), compilers


def test_a_first_run_records_its_step_before_the_tokens_and_keeps_it(tmp_path, monkeypatch):
    run, compilers = _set_up(tmp_path, "run", monkeypatch)
    assert compilers.handed and compilers.handed_after_tokens is False
    # the step recorded is the step the run trains with
    assert ahead.record(run.train_step.accumulate, run.train_step.update) == compilers.handed
    assert compilers.waited == [run.kernels.manifest]


def test_a_shape_with_a_manifest_is_not_recorded(tmp_path, monkeypatch):
    first, _ = _set_up(tmp_path, "first", monkeypatch)
    manifest = first.kernels.manifest
    manifest.parent.mkdir(parents=True)
    manifest.write_bytes(pickle.dumps((None, [(("global", "m", "k"), (), "k-key.kernel", 1.0)])))
    run, compilers = _set_up(tmp_path, "second", monkeypatch)
    assert compilers.handed is None and compilers.waited == [manifest]


def test_where_no_process_can_fork_the_step_compiles_after_one_line(monkeypatch, capsys,
                                                                      tmp_path):
    import errno
    import multiprocessing
    import types

    monkeypatch.setattr(ahead, "SIMULATOR", False)
    killed = []

    def no_fork(method):            # a platform without fork
        raise ValueError(f"cannot find context for {method!r}")

    def fork_fails(method):         # out of processes after the first compiler
        def process(target, daemon, args):
            started = len(killed)

            def start():
                if started:
                    raise OSError(errno.EAGAIN, "Resource temporarily unavailable")
                killed.append(False)
            return types.SimpleNamespace(start=start, kill=lambda: killed.__setitem__(0, True))
        return types.SimpleNamespace(SimpleQueue=multiprocessing.SimpleQueue,
                                     Queue=multiprocessing.Queue, Value=multiprocessing.Value,
                                     Array=multiprocessing.Array, Process=process)
    for context, why in ((no_fork, "cannot find context for 'fork'"),
                         (fork_fails, "[Errno 11] Resource temporarily unavailable")):
        monkeypatch.setattr(multiprocessing, "get_context", context)
        assert ahead.start_compiling(tmp_path, processes=3) is None
        assert capsys.readouterr().err.splitlines() == [
            f"kernels: cannot start compiling processes ({why}); the first step compiles "
            "its kernels one after another"]
    assert killed == [True]         # the one that started is not left behind


def test_a_bad_number_of_compiling_processes_is_one_line(monkeypatch):
    from microgpt.errors import UserError
    from microgpt.run import start_compiling
    from microgpt.train_args import parse_args

    for value in ("0", "four", "-2"):
        monkeypatch.setenv("MICROGPT_COMPILE_PROCESSES", value)
        with pytest.raises(UserError, match=f"^MICROGPT_COMPILE_PROCESSES={value}: the number"):
            start_compiling(parse_args(["--device", "cuda"]))
