"""The cluster atoms that the persistent GEMM's clustered tile is built on (kernels/atoms:
cluster_rank, cluster_index, cluster_count, cluster_sync, tma_load_2d_multicast,
mbarrier_arrive_cluster) against NumPy: on the GPU in clusters of two blocks, launched
as gemm.persistent launches them; in the simulator their twins, a cluster of one block."""
import functools

import numpy as np
from helpers import ON_GPU, bf16, randn
from hypothesis import given
from hypothesis import strategies as st
from numba import cuda, int32, types, uint16, uint64

from microgpt.kernels.atoms import (bulk_commit, bulk_wait, cluster_count, cluster_index,
                                    cluster_rank, cluster_sync, fence_barrier_init,
                                    fence_tensor_map, mbarrier_arrive_cluster,
                                    mbarrier_arrive_expect_tx, mbarrier_init, mbarrier_try_wait,
                                    shared_address, tma_load_2d_multicast, tma_store_2d)
from microgpt.kernels.gemm import launch
from microgpt.kernels.layouts.tensor_maps import tensor_map

ROWS, COLS = 64, 64          # a box of bf16, 128-byte rows
CLUSTER = 2 if ON_GPU else 1
CLUSTERS = 2


@functools.cache
def cluster_kernel(cluster):
    part = ROWS // cluster

    @cuda.jit
    def kernel(out, src, src_map, out_map, seen):
        # each block of a cluster copies its part of src's rows into every block's shared
        # memory (multicast), and arrives on every block's second barrier; each then waits
        # for the whole box and for every block's arrival, and writes the box out
        raw = cuda.shared.array(0, uint16)
        smem = raw[int32((1024 - shared_address(raw, 0) % 1024) % 1024 // 2):]
        bars = cuda.shared.array(2, uint64)
        rank, at = cluster_rank(), cluster_index() * cluster + cluster_rank()
        if cuda.threadIdx.x == 0:
            mbarrier_init(bars, 0, 1)
            mbarrier_init(bars, 1, cluster)
            fence_barrier_init()
        cluster_sync()
        if cuda.threadIdx.x == 0:
            fence_tensor_map(src_map)
            mbarrier_arrive_expect_tx(bars, 0, ROWS * COLS * 2)
            tma_load_2d_multicast(smem, rank * part * COLS, src, src_map, 0, rank * part,
                                  bars, 0, uint16((1 << cluster) - 1))
            for other in range(cluster):
                mbarrier_arrive_cluster(bars, 1, other)
        while not mbarrier_try_wait(bars, 0, 0):
            pass
        while not mbarrier_try_wait(bars, 1, 0):
            pass
        if cuda.threadIdx.x == 0:
            fence_tensor_map(out_map)
            tma_store_2d(out, out_map, 0, at * ROWS, smem, 0)
            bulk_commit()
            bulk_wait()
            seen[at] = cluster_count() * 100 + rank
        cluster_sync()         # no block leaves while another may still arrive in it
    return kernel


@given(seed=st.integers(0, 2**32 - 1))
def test_a_cluster_shares_its_copies_and_barriers(seed):
    rng = np.random.default_rng(seed)
    src = bf16(randn(rng, ROWS, COLS))[0]
    blocks = CLUSTERS * CLUSTER
    d_src = cuda.to_device(src)
    out = cuda.to_device(np.full((blocks * ROWS, COLS), 0x7FC0, np.uint16))
    seen = cuda.to_device(np.full(blocks, -1, np.int32))
    args = (out, d_src, tensor_map(d_src, ROWS // CLUSTER, COLS),
            tensor_map(out, ROWS, COLS), seen)
    kernel, shared = cluster_kernel(CLUSTER), ROWS * COLS * 2 + 1024
    if CLUSTER == 1:
        kernel[blocks, 32, 0, shared](*args)
    else:
        signature = (types.uint16[:, ::1], types.uint16[:, ::1], types.uint64[::1],
                     types.uint64[::1], types.int32[::1])
        launch.launch_by_driver(kernel, signature, blocks, CLUSTER, 32, shared, 0, args)
    np.testing.assert_array_equal(out.copy_to_host(), np.tile(src, (blocks, 1)))
    ranks = np.arange(blocks) % CLUSTER
    np.testing.assert_array_equal(seen.copy_to_host(), CLUSTERS * 100 + ranks)
