"""The simulator's race check (tests/simulator_racecheck.py) on toy kernels: each racy
kernel fails with a message naming the kernel, the array, the element and both threads,
and its twin with the barrier passes; so do atomics, two-phase reductions, the
block-wide reduction twins, mbarrier hand-offs and dynamic shared arrays of two dtypes."""
import numpy as np
import pytest
from numba import cuda, float32, int32, uint16, uint32, uint64
from simulator_racecheck import RaceError, checking

from microgpt.kernels.atoms import mbarrier_arrive, mbarrier_init, mbarrier_try_wait
from microgpt.kernels.common import REDUCE_SCRATCH, block_sum
from microgpt.kernels.device import SIMULATOR

pytestmark = pytest.mark.skipif(not SIMULATOR, reason="a check of the CUDA simulator")
N = 8       # threads per block: every thread costs the simulator ~2 ms


def launch(kernel, blocks=1, threads=N, dynamic=0):
    out = np.full(threads * blocks, np.nan, np.float32)
    with checking():
        kernel[blocks, threads, 0, dynamic](out)
    return out


def neighbour_kernel(barrier):
    @cuda.jit
    def neighbour(out):
        tile = cuda.shared.array(N, float32)
        tid = cuda.threadIdx.x
        tile[tid] = tid + 1
        if barrier:
            cuda.syncthreads()
        out[cuda.blockIdx.x * N + tid] = tile[(tid + 1) % N]
    return neighbour


def test_a_read_before_the_barrier_fails_naming_kernel_array_element_and_threads():
    with pytest.raises(RaceError, match=r"neighbour: shared array tile \(.*test_simulator_"
                       r"racecheck.py:\d+\), element \[\d\]: thread \d \(threadIdx \(\d, 0, 0\)"
                       r"\) \w+ it after a \w+ by thread \d \(threadIdx"):
        launch(neighbour_kernel(False))


def test_the_same_read_after_the_barrier_passes_in_every_block():
    out = launch(neighbour_kernel(True), blocks=3)
    np.testing.assert_array_equal(out, np.tile(np.roll(np.arange(1, N + 1), -1), 3))


def reuse_kernel(barrier):
    @cuda.jit
    def reuse(out):
        # a tile written, read across threads, then rewritten: the second write must wait
        # for the other threads' reads
        tile = cuda.shared.array(N, float32)
        tid = cuda.threadIdx.x
        total = float32(0.0)
        for step in range(2):
            tile[tid] = tid + step
            cuda.syncthreads()
            total += tile[N - 1 - tid]
            if barrier:
                cuda.syncthreads()
        out[tid] = total
    return reuse


def test_a_rewrite_before_the_others_have_read_fails():
    # whichever comes first: thread 0's rewrite after thread 7's read, or thread 7's read
    # after thread 0's rewrite
    with pytest.raises(RaceError, match="reuse: shared array tile .* (writes it after a read"
                       "|reads it after a write)"):
        launch(reuse_kernel(False))


def test_a_rewrite_after_a_barrier_passes():
    out = launch(reuse_kernel(True))
    np.testing.assert_array_equal(out, 2 * (N - 1 - np.arange(N)) + 1)


def atomic_kernel(barrier):
    @cuda.jit
    def count(out):
        counter = cuda.shared.array(1, float32)
        tid = cuda.threadIdx.x
        if tid == 0:
            counter[0] = 0
        cuda.syncthreads()
        cuda.atomic.add(counter, 0, tid + 1)
        if barrier:
            cuda.syncthreads()
        out[tid] = counter[0]
    return count


def test_atomics_of_many_threads_then_a_barrier_pass():
    np.testing.assert_array_equal(launch(atomic_kernel(True)), N * (N + 1) / 2)


def test_a_read_of_an_atomic_sum_before_the_barrier_fails():
    with pytest.raises(RaceError, match="count: shared array counter .* element \\[0\\]"):
        launch(atomic_kernel(False))


def tree_kernel(barrier):
    @cuda.jit
    def tree(out):
        # a two-phase sum: halves folded level by level, a barrier after each level
        partial = cuda.shared.array(N, float32)
        tid = cuda.threadIdx.x
        partial[tid] = tid + 1
        cuda.syncthreads()
        half = N // 2
        while half > 0:
            if tid < half:
                partial[tid] += partial[tid + half]
            if barrier:
                cuda.syncthreads()
            half //= 2
        cuda.syncthreads()
        out[tid] = partial[0]
    return tree


def test_a_tree_reduction_with_a_barrier_per_level_passes():
    np.testing.assert_array_equal(launch(tree_kernel(True)), N * (N + 1) / 2)


def test_a_tree_reduction_without_them_fails():
    with pytest.raises(RaceError, match="tree: shared array partial"):
        launch(tree_kernel(False))


@cuda.jit
def two_block_sums(out):
    # the kernels' block reduction twice on one scratch (its twin is what the simulator runs)
    scratch = cuda.shared.array(REDUCE_SCRATCH, float32)
    tid = cuda.threadIdx.x
    first = block_sum(float32(tid), scratch)
    out[tid] = first + block_sum(float32(1.0), scratch)


def test_back_to_back_block_reductions_pass():
    np.testing.assert_array_equal(launch(two_block_sums, threads=32), 31 * 16 + 32)


def handoff_kernel(wait):
    @cuda.jit
    def handoff(out):
        # thread 0 fills a tile and arrives on an mbarrier; the others wait for its phase
        tile = cuda.shared.array(N, float32)
        bars = cuda.shared.array(1, uint64)
        tid = cuda.threadIdx.x
        if tid == 0:
            mbarrier_init(bars, 0, 1)
        cuda.syncthreads()
        if tid == 0:
            for i in range(N):
                tile[i] = 2 * i
            mbarrier_arrive(bars, 0, 1)
        elif wait:
            while not mbarrier_try_wait(bars, 0, 0):
                pass
        out[tid] = tile[N - 1 - tid]
    return handoff


def test_a_read_after_waiting_on_the_writers_mbarrier_passes():
    np.testing.assert_array_equal(launch(handoff_kernel(True)), 2 * (N - 1 - np.arange(N)))


def test_a_read_without_the_wait_fails():
    with pytest.raises(RaceError, match="handoff: shared array tile"):
        launch(handoff_kernel(False))


def dynamic_kernel(barrier):
    @cuda.jit
    def views(out):
        # one buffer, two dtypes: thread 0 writes a uint32 pair, thread 1 reads its high half
        raw = cuda.shared.array(0, uint16)
        pairs = cuda.shared.array(0, uint32)
        tid = cuda.threadIdx.x
        if tid == 0:
            pairs[0] = uint32(7 << 16 | 5)
        if barrier:
            cuda.syncthreads()
        if tid == 1:
            out[0] = raw[1]
    return views


def test_dynamic_shared_views_of_two_dtypes_see_each_other():
    with pytest.raises(RaceError, match=r"views: shared array dynamic shared memory .* "
                       r"element byte 2: thread [01] .* thread [01]"):
        launch(dynamic_kernel(False), threads=2, dynamic=16)
    assert launch(dynamic_kernel(True), threads=2, dynamic=16)[0] == 7


def test_off_outside_checking():
    out = np.full(N, np.nan, np.float32)
    neighbour_kernel(False)[1, N](out)      # racy, unchecked: it runs
    assert not np.isnan(out).any()


def test_a_thread_reading_its_own_writes_needs_no_barrier():
    @cuda.jit
    def own(out):
        tile = cuda.shared.array((N, 2), int32)
        tid = cuda.threadIdx.x
        tile[tid, 0] = tid
        tile[tid, 1] = tile[tid, 0] + 1
        out[tid] = tile[tid, 1]
    np.testing.assert_array_equal(launch(own), np.arange(N) + 1)
