"""Run under mpiexec by tests/test_distributed.py, each rank as if on a host of its own:
ZeRO-1's collectives on the cuda backend (distributed.NCCLWorld's sharded sync) in the CUDA
simulator, NCCL's calls done by their twin (nccl_twin.py). Every rank checks what each
collective left in its buffers against what NCCL must leave there, and exits 0 when all
hold. No kernel runs: the buffers are filled from the host.

    python nccl_worker.py
"""
import sys
from types import SimpleNamespace

import numpy as np

import nccl_twin

N, N_DECAY = 1000, 700       # a flat buffer that no ALIGN-ed shard bound divides evenly


def gradient_of(rank):
    return np.random.default_rng(rank).standard_normal(N).astype(np.float32)


def parameters_of(rank):
    return np.random.default_rng(100 + rank).standard_normal(N).astype(np.float32)


def bits_of(rank):
    return np.random.default_rng(200 + rank).integers(0, 2 ** 15, N_DECAY).astype(np.uint16)


def main():
    nccl_twin.install()
    from numba import cuda

    from microgpt import distributed
    from microgpt.zero import Shards
    world = distributed.init("cuda")
    assert isinstance(world, distributed.NCCLWorld) and world.local_rank == 0
    rank, size = world.rank, world.world_size
    shards = Shards(N, size, rank)
    lo, hi = shards.span()

    # what each rank's update leaves: its own shard written, the rest stale (NaN here)
    params, bits = np.full(N, np.nan, np.float32), np.full(N_DECAY, 0xFFFF, np.uint16)
    params[lo:hi] = parameters_of(rank)[lo:hi]
    bits[lo:min(hi, N_DECAY)] = bits_of(rank)[lo:min(hi, N_DECAY)]
    model = SimpleNamespace(grads_flat=cuda.to_device(gradient_of(rank)),
                            params_flat=cuda.to_device(params), matrices_flat=cuda.to_device(bits),
                            layout=SimpleNamespace(size=N, n_decay=N_DECAY),
                            backend=SimpleNamespace(stream=cuda.stream()))
    sync = world.sharded_sync(model, shards)

    # the backward's ranges, announced out of the flat order, some across a shard bound
    cuts = [0, 130, 400, 511, 600, 768, 999, N]
    ranges = list(zip(cuts, cuts[1:]))
    for i in (6, 5, 4, 3, 2, 1, 0):
        sync.ready(*ranges[i])
    sync.finish()
    got = model.grads_flat.copy_to_host()
    mean = np.mean([gradient_of(r) for r in range(size)], axis=0, dtype=np.float32)
    np.testing.assert_allclose(got[lo:hi], mean[lo:hi], rtol=1e-6, atol=0)
    mine = gradient_of(rank)
    outside = np.r_[0:lo, hi:N]
    np.testing.assert_array_equal(got[outside], mine[outside])     # NCCL's reduce: root only
    reduced = [(name, root) for name, _, _, root in nccl_twin.calls if name == "reduce"]
    assert len(reduced) == sum(len(shards.owners(a, b)) for a, b in ranges) > len(ranges)

    part = cuda.to_device(np.array([rank + 0.25], np.float32))
    total = cuda.to_device(np.array([np.nan], np.float32))
    sync.total(total, part)
    assert total.copy_to_host()[0] == sum(r + 0.25 for r in range(size))

    sync.gather()
    want_params = np.empty(N, np.float32)
    want_bits = np.empty(N_DECAY, np.uint16)
    for r in range(size):
        a, b = shards.span(r)
        want_params[a:b] = parameters_of(r)[a:b]
        want_bits[a:min(b, N_DECAY)] = bits_of(r)[a:min(b, N_DECAY)]
    np.testing.assert_array_equal(model.params_flat.copy_to_host(), want_params)
    np.testing.assert_array_equal(model.matrices_flat.copy_to_host(), want_bits)
    assert not nccl_twin.groups, "a groupStart() without its groupEnd()"
    print(f"rank {rank}: every collective as NCCL's", flush=True)


if __name__ == "__main__":
    sys.exit(main())
