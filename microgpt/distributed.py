"""Data parallelism: one process per device, gradients averaged by an all-reduce.

Launch with MPI, as users of the field already do:

    mpirun -n 4 python -m microgpt.train --device cuda ...

Every rank holds the whole model and optimizer, reads its own rows of each global batch
(--batch-size is the global batch; every rank draws the same batches and takes its slice),
and after the backward pass the flat gradient buffer is averaged across ranks, so every
rank takes the same AdamW step and the parameters stay identical. MPI (mpi4py) starts the
ranks and carries the small messages; the gradients travel over NCCL (CuPy's binding, on
the numba device buffer itself, no copy) on the cuda backend, and over MPI on numpy.
"""
import os

from microgpt.errors import UserError


class DistributedError(UserError):
    """Data-parallel set-up failed: the message says what to install or change."""


class CollectiveError(UserError):
    """A user error that every rank raises at the same point (the ranks disagree on the run,
    a batch that does not divide among them): rank 0 reports it, the others exit quietly."""


class SingleProcess:
    """The world of one: nothing to exchange."""
    rank, world_size = 0, 1

    def allreduce_mean(self, flat, backend):
        pass

    def mean(self, value):
        return value

    def any(self, flag):
        return flag

    def allgather(self, value):
        return [value]

    def barrier(self):
        pass


class MPIWorld:
    """Ranks started by mpirun; gradients all-reduced with MPI (the numpy backend)."""

    def __init__(self, comm):
        self.comm = comm
        self.rank, self.world_size = comm.Get_rank(), comm.Get_size()

    def allreduce_mean(self, flat, backend):
        from mpi4py import MPI
        self.comm.Allreduce(MPI.IN_PLACE, flat, op=MPI.SUM)
        flat /= self.world_size

    def mean(self, value):
        """The mean of a Python float over the ranks (the logged loss)."""
        return self.comm.allreduce(value) / self.world_size

    def any(self, flag):
        """True on every rank when flag is true on one (a Ctrl-C that reached one rank)."""
        return bool(self.comm.allreduce(int(flag)))

    def allgather(self, value):
        """Every rank's value (a small picklable object), in rank order, on every rank."""
        return self.comm.allgather(value)

    def barrier(self):
        self.comm.Barrier()

    def abort(self, status):
        """End every rank with status: the others may be waiting for this one in a
        collective, where an ordinary exit would leave them forever."""
        self.comm.Abort(status)


class NCCLWorld(MPIWorld):
    """Ranks started by mpirun, one GPU each; gradients all-reduced by NCCL on the device."""

    def __init__(self, comm):
        super().__init__(comm)
        from cupy.cuda import nccl
        self._nccl = nccl
        uid = comm.bcast(nccl.get_unique_id() if self.rank == 0 else None, root=0)
        self._nccl_comm = nccl.NcclCommunicator(self.world_size, uid, self.rank)

    def allreduce_mean(self, flat, backend):
        nccl = self._nccl
        ptr = flat.__cuda_array_interface__["data"][0]
        handle = backend.stream.handle      # a ctypes pointer or a cuda-python CUstream
        stream = int(getattr(handle, "value", handle) or 0)
        self._nccl_comm.allReduce(ptr, ptr, flat.size, nccl.NCCL_FLOAT32, nccl.NCCL_AVG, stream)


def _launched_by_mpi():
    return any(k in os.environ for k in ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK",
                                         "MPI_LOCALNRANKS"))


def init(backend):
    """The world this process belongs to; backend is "numpy" or "cuda".

    Outside mpirun (or with one rank) this is SingleProcess. On cuda, each rank selects the
    GPU of its local rank before any CUDA memory is allocated."""
    if not _launched_by_mpi():
        return SingleProcess()
    try:
        from mpi4py import MPI
    except ImportError:
        raise DistributedError("launched by mpirun but mpi4py is missing: "
                               "pip install 'microgpt-engine[mpi]'") from None
    comm = MPI.COMM_WORLD
    if comm.Get_size() == 1:
        return SingleProcess()
    if backend == "numpy":
        return MPIWorld(comm)
    from numba import cuda
    local_rank = comm.Split_type(MPI.COMM_TYPE_SHARED).Get_rank()
    if local_rank >= len(cuda.gpus):
        raise DistributedError(f"local rank {local_rank} has no GPU ({len(cuda.gpus)} visible): "
                               "start at most one rank per GPU")
    cuda.select_device(local_rank)
    try:
        return NCCLWorld(comm)
    except ImportError:
        raise DistributedError("data parallelism on cuda needs CuPy's NCCL binding: "
                               "pip install cupy-cuda13x") from None
