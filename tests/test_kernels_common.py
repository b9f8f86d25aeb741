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


def test_row_block_fits_the_row():
    assert common.row_block(24, 512) == 32
    assert common.row_block(768, 128) == 128
    assert common.row_block(65, 1024) == 96
