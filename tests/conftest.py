"""Test-wide set-up: the CUDA simulator or a real GPU, and the Hypothesis profiles.

MICROGPT_TEST_DEVICE=gpu runs the kernel tests on a real GPU with the "gpu" Hypothesis
profile (real shapes); anything else runs them in numba's CUDA simulator
with the "sim" profile (tiny shapes). The simulator is chosen through
NUMBA_ENABLE_CUDASIM, which numba reads when numba.cuda is first imported, so it is set
here, before any test module imports it.
"""
import os
import sys
import threading

import pytest
from hypothesis import HealthCheck, settings

ON_GPU = os.environ.get("MICROGPT_TEST_DEVICE", "sim") == "gpu"
if not ON_GPU:
    os.environ["NUMBA_ENABLE_CUDASIM"] = "1"

# CI (CI=true) replays the same examples every run: a red CI then always means a change,
# while runs elsewhere keep drawing new examples.
_common = dict(deadline=None, derandomize=os.environ.get("CI") == "true",
               suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.register_profile("sim", max_examples=8, **_common)
# On a GPU the float64 host references of real shapes (a 16 x 12 x 1024 x 1024 attention,
# GFLOP-sized products) dominate the time: MICROGPT_GPU_EXAMPLES sets the examples per test.
settings.register_profile("gpu", max_examples=int(os.environ.get("MICROGPT_GPU_EXAMPLES", 12)),
                          **_common)
settings.register_profile("cpu", max_examples=30, **_common)   # NumPy-only tests
settings.load_profile("gpu" if ON_GPU else "sim")


def _lock_simulator_shared_arrays():
    """The simulator runs each simulated thread as a Python thread, and its
    cuda.shared.array (numba-cuda 0.30.4, simulator/kernelapi.py FakeCUDAShared.array)
    looks the calling line up in a dict and, when absent, creates and stores the array:
    an unlocked get-then-create. Two threads of a block that both miss before either
    stores get different arrays, so one thread's shared writes are never seen by the
    others and it reads uninitialised memory. A GIL switch inside that window is rare, so
    this shows under load (tests/test_kernels_attention.py's pipeline test returned ~1e12,
    issue 13); with a 1 ms sleep forced into the window, 19 launches in 20 of a 64-thread
    kernel went wrong, and none with this lock.
    Upstream fixed the same kind of race in the simulator's module swapping
    (NVIDIA/numba-cuda PR 690); shared arrays are still unlocked there. This replacement
    holds a lock from the lookup to the store. It keys the allocation by the caller's
    (file, line) as the original does, read from the caller's frame instead of a
    formatted stack (which also saves the simulator time)."""
    import numpy as np
    from numba.cuda import types
    from numba.cuda.np import numpy_support
    from numba.cuda.simulator import kernelapi

    lock = threading.Lock()

    def array(self, shape, dtype, alignment=None):
        if alignment is not None:
            raise RuntimeError("Array alignment is not supported in cudasim")
        if isinstance(dtype, types.Type):
            dtype = numpy_support.as_dtype(dtype)
        if shape == 0:      # dynamic shared memory: one buffer for every such call
            count = self._dynshared_size // dtype.itemsize
            return np.frombuffer(self._dynshared.data, dtype=dtype, count=count)
        caller = sys._getframe(1)
        key = (caller.f_code.co_filename, caller.f_lineno)
        with lock:
            arr = self._allocations.get(key)
            if arr is None:
                arr = self._allocations[key] = np.empty(shape, dtype)
        return arr

    kernelapi.FakeCUDAShared.array = array


if not ON_GPU:
    _lock_simulator_shared_arrays()


@pytest.fixture
def no_launches(monkeypatch):
    """Fails the test if it launches a kernel: the empty-input rule (kernels/common.py)
    launches nothing. The simulator runs an empty grid as a silent no-op, so there its
    launches are refused; a GPU refuses an empty grid itself."""
    if not ON_GPU:
        from numba.cuda.simulator.kernel import FakeCUDAKernel

        def refuse(kernel, *args):
            raise AssertionError(f"{kernel.fn.__name__} launched on an empty input")
        monkeypatch.setattr(FakeCUDAKernel, "__call__", refuse)
