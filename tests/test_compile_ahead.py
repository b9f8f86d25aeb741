"""A first run's kernels, found by recording its step (kernels/ahead.py) instead of
compiling them one after another in it.

The recording runs the step's host code with every launch listed and nothing run; what
it lists must be what the step then launches for real, the same kernels with the same
argument types (the manifest a first run writes). In the simulator (CI) the tiny config
in fp32; on a GPU (MICROGPT_TEST_DEVICE=gpu) a small bf16 model, whose tensor-core
kernels ask for their compiled overload in the host code (the shared-memory opt-in)."""
import numpy as np
from helpers import ON_GPU

from microgpt import GPT, get_config
from microgpt.cuda_backend import CudaBackend
from microgpt.kernels import ahead, cache
from microgpt.optim import AdamW, AdamWConfig
from microgpt.step import Step

if ON_GPU:
    CONFIG, PRECISION, B, T = dict(n_layer=1, d_model=128, n_head=2, context=128,
                                   vocab_size=512), "bf16", 2, 128
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
