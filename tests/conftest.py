"""Test-wide set-up: the CUDA simulator or a real GPU, and the Hypothesis profiles.

MICROGPT_TEST_DEVICE=gpu runs the kernel tests on a real GPU with the "gpu" Hypothesis
profile (real shapes); anything else runs them in numba's CUDA simulator
with the "sim" profile (tiny shapes). The simulator is chosen through
NUMBA_ENABLE_CUDASIM, which numba reads when numba.cuda is first imported, so it is set
here, before any test module imports it. On a GPU, MICROGPT_TEST_KERNEL_CACHE=DIR keeps the
compiled kernels in DIR (microgpt.kernels.cache), shared by the workers and the next run.
"""
import os

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


if not ON_GPU:
    import simulator_overheads
    import simulator_racecheck
    simulator_overheads.install()
    simulator_racecheck.install()
elif os.environ.get("MICROGPT_TEST_KERNEL_CACHE"):
    # pytest-xdist's workers each compile the same kernels, and a machine lent for an hour
    # compiles them all again: through the kernel cache they share the compilations, and a
    # cache directory carried to the next machine gives them back (an opt-in: the tests of
    # compilation itself want fresh compiles)
    from microgpt.kernels import cache as _kernel_cache
    _kernel_cache.use(os.environ["MICROGPT_TEST_KERNEL_CACHE"])

# pytest-xdist's workers take whole files (--dist loadfile), by default those with the most
# tests first. The suite's time is set by its longest files: they go first instead, the
# compile check's one process above all (~10 minutes of one CPU; when scheduled last it
# ran alone at the end). The rest keep their order. Without xdist both are harmless.
LONGEST_FIRST = ("test_compile.py", "test_cuda_model.py", "test_kernels_gemm_bf16.py",
                 "test_generate.py", "test_kernels_flash_attention.py", "test_train_cli.py",
                 "test_kernels_layernorm.py", "test_kernels_gemm.py")


def pytest_configure(config):
    config.option.loadscopereorder = False      # xdist's --no-loadscope-reorder


def pytest_collection_modifyitems(items):
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


# The kernel tests run under the simulator's race check (tests/simulator_racecheck.py): a
# missing barrier between two threads' accesses of a shared element fails the test.
# MICROGPT_RACECHECK=0 turns it off, to debug a kernel without it.
RACE_CHECK = not ON_GPU and os.environ.get("MICROGPT_RACECHECK", "1") != "0"


@pytest.fixture(autouse=True)
def race_check(request):
    if RACE_CHECK and request.path.name.startswith("test_kernels_"):
        with simulator_racecheck.checking():
            yield
    else:
        yield


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
