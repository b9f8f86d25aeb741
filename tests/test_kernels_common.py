"""kernels/common.py: the block reductions, both the warp-shuffle version (GPU only) and its
shared-memory twin (which the simulator runs, and which runs on a GPU too)."""
import numpy as np
import pytest
from helpers import ON_GPU, TOL_F32_OP, assert_close, poisoned, randn
from hypothesis import given
from hypothesis import strategies as st
from numba import cuda, float32

from microgpt.kernels import common

IMPLEMENTATIONS = [("shared", common.shared_reduction, 1024)]
if ON_GPU:
    IMPLEMENTATIONS.append(("shuffle", common.shuffle_reduction, common.WARP))
BLOCKS = st.sampled_from([32, 64, 256, 1024] if ON_GPU else [32, 64])


def reduction_kernel(make_reduction, scratch_size):
    block_sum = make_reduction(common._add, np.float32(0.0))
    block_max = make_reduction(common._max, np.float32(-np.inf))

    @cuda.jit
    def kernel(sums, maxima, x):
        # every thread writes what it got back, so a thread left out of the result fails
        scratch = cuda.shared.array(scratch_size, float32)
        tid = cuda.threadIdx.x
        sums[tid] = block_sum(x[tid], scratch)
        maxima[tid] = block_max(x[tid], scratch)
    return kernel


@pytest.mark.parametrize("name,make_reduction,scratch_size", IMPLEMENTATIONS)
@given(block=BLOCKS, seed=st.integers(0, 2**32 - 1))
def test_block_reductions(name, make_reduction, scratch_size, block, seed):
    # one sign, so the sum is well conditioned and 1e-5 measures the reduction, not round-off
    x = np.abs(randn(np.random.default_rng(seed), block)) + np.float32(0.1)
    sums, maxima = cuda.to_device(poisoned((block,))), cuda.to_device(poisoned((block,)))
    reduction_kernel(make_reduction, scratch_size)[1, block](sums, maxima, cuda.to_device(x))
    assert_close(sums.copy_to_host(), np.full(block, x.astype(np.float64).sum()), TOL_F32_OP,
                 f"{name} block_sum")
    np.testing.assert_array_equal(maxima.copy_to_host(), np.full(block, x.max()))


WARP_IMPLEMENTATIONS = [("shared", common.shared_warp_reduction, 1024)]
if ON_GPU:
    WARP_IMPLEMENTATIONS.append(("shuffle", common.shuffle_warp_reduction, common.WARP))


@pytest.mark.parametrize("name,make_reduction,scratch_size", WARP_IMPLEMENTATIONS)
@given(block=BLOCKS, seed=st.integers(0, 2**32 - 1))
def test_warp_sums(name, make_reduction, scratch_size, block, seed):
    """Each warp's sum, returned to each of its lanes (and no other warp's)."""
    warp_sum = make_reduction(common._add, np.float32(0.0))

    @cuda.jit
    def kernel(sums, x):
        scratch = cuda.shared.array(scratch_size, float32)
        sums[cuda.threadIdx.x] = warp_sum(x[cuda.threadIdx.x], scratch)
    x = np.abs(randn(np.random.default_rng(seed), block)) + np.float32(0.1)
    sums = cuda.to_device(poisoned((block,)))
    kernel[1, block](sums, cuda.to_device(x))
    want = np.repeat(x.astype(np.float64).reshape(-1, common.WARP).sum(axis=1), common.WARP)
    assert_close(sums.copy_to_host(), want, TOL_F32_OP, f"{name} warp_sum")


def test_row_block_fits_the_row():
    assert common.row_block(24, 512) == 32
    assert common.row_block(768, 128) == 128
    assert common.row_block(65, 1024) == 96
    assert common.row_block(0, 256) == 32     # an empty row still gets a valid block


@pytest.mark.parametrize("block,multiple", [(1, 1), (1024, 1), (32, 32), (1024, 32)])
def test_block_size_accepts_the_limits(block, multiple):
    common.check_block_size(block, multiple)


@pytest.mark.parametrize("block,multiple", [(0, 1), (-32, 32), (1025, 1), (1056, 32),
                                            (48, 32), (31, 32)])
def test_block_size_rejects_beyond_the_limits(block, multiple):
    with pytest.raises(ValueError, match="block size must be a multiple of"):
        common.check_block_size(block, multiple)


def test_check_array_names_each_fault():
    x = cuda.to_device(np.ones((2, 3), np.float32))
    common.check_array("x", x, (2, 3))
    with pytest.raises(ValueError, match=r"x: expected shape \(3, 2\), got \(2, 3\)"):
        common.check_array("x", x, (3, 2))
    with pytest.raises(TypeError, match="x: expected dtype int32, got float32"):
        common.check_array("x", x, (2, 3), np.int32)
    with pytest.raises(TypeError, match="x: expected a device array, got ndarray"):
        common.check_array("x", np.ones((2, 3), np.float32), (2, 3))
    with pytest.raises(ValueError, match="x: expected a C-contiguous array"):
        common.check_array("x", cuda.to_device(np.ones((2, 6), np.float32))[:, ::2], (2, 3))


def test_check_not_empty():
    common.check_not_empty("C", 1)
    for length in (0, -1):
        with pytest.raises(ValueError, match=f"C must be at least 1, got {length}"):
            common.check_not_empty("C", length)
