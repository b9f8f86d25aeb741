"""Data parallelism: one process per device, gradients averaged by an all-reduce.

Launch with MPI, as users of the field already do:

    mpirun -n 4 python -m microgpt.train --device cuda ...

Every rank holds the whole model and optimizer, reads its own rows of each global batch
(--batch-size is the global batch; every rank draws the same batches and takes its slice),
and before the update the flat gradient buffer is averaged across ranks, so every
rank takes the same AdamW step and the parameters stay identical. MPI (mpi4py) starts the
ranks and carries the small messages; the gradients travel over NCCL (CuPy's binding, on
the numba device buffer itself, no copy) on the cuda backend, and over MPI on numpy.

The average is taken while the backward runs. The backward hands its gradient to the
world's gradient sync (``world.gradient_sync(model)``, passed to GPT.enqueue_backward and
held by microgpt.step.Step) range by range, as each becomes final: ``ready(lo, hi)`` when
no later launch of the backward writes grads_flat[lo:hi] (each block's matrices after that
block's backward, last layer first; then wpe, which the encoder's scatter ends, and the
norms; then wte in row ranges, its gradient's last writer being the tied LM head's dW,
which runs last for that, one launch a range), ``finish()`` at its end, after which, in the device's order of work, the
buffer holds the mean over the ranks. On the cuda backend each range is all-reduced on a
stream of its own while the backward goes on (NCCLGradients); on numpy at once, in place.
"""
import os

from microgpt.errors import UserError


class DistributedError(UserError):
    """Data-parallel set-up failed: the message says what to install or change."""


class CollectiveError(UserError):
    """A user error that every rank raises at the same point (the ranks disagree on the run,
    a batch that does not divide among them): rank 0 reports it, the others exit quietly."""


class LocalGradients:
    """The gradient sync of a world of one (the model's default): nothing to exchange."""

    def ready(self, lo, hi):
        pass

    def finish(self):
        pass


LOCAL = LocalGradients()


class SingleProcess:
    """The world of one: nothing to exchange."""
    rank, world_size = 0, 1

    def gradient_sync(self, model):
        return LOCAL

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

    def gradient_sync(self, model):
        return MPIGradients(self.comm, model.grads_flat)

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

    def gradient_sync(self, model):
        return NCCLGradients(self._nccl, self._nccl_comm, model.grads_flat,
                             model.backend.stream)


class MPIGradients:
    """Each range averaged over the ranks in place as soon as it is ready (the numpy
    backend computes synchronously: there is nothing to overlap)."""

    def __init__(self, comm, flat):
        self.comm, self.flat = comm, flat

    def ready(self, lo, hi):
        from mpi4py import MPI
        part = self.flat[lo:hi]
        self.comm.Allreduce(MPI.IN_PLACE, part, op=MPI.SUM)
        part /= self.comm.Get_size()

    def finish(self):
        pass


class NCCLGradients:
    """Each range all-reduced by NCCL (ncclAvg, on the numba device buffer itself) on a
    stream of its own while the backward goes on on the compute stream.

    ready() records an event on the compute stream after the kernels that wrote the range
    and makes the reduce stream wait for it; finish() makes the compute stream wait for
    every all-reduce enqueued so far, so the update reads the mean. Waiting on an event is
    also how a second stream joins a CUDA graph capture (fork, then join before the capture
    ends), so the captured step holds the all-reduces too: one graph a step. Re-recording
    one event is safe: a wait takes the record made before it."""

    def __init__(self, nccl, comm, flat, compute):
        from numba import cuda
        self._nccl, self._comm, self._compute = nccl, comm, compute
        self._base = flat.__cuda_array_interface__["data"][0]
        self._itemsize = flat.dtype.itemsize
        self._stream = cuda.stream()
        self._written = cuda.event(timing=False)
        self._reduced = cuda.event(timing=False)

    def ready(self, lo, hi):
        nccl = self._nccl
        self._written.record(self._compute)
        self._written.wait(self._stream)
        ptr = self._base + lo * self._itemsize
        self._comm.allReduce(ptr, ptr, hi - lo, nccl.NCCL_FLOAT32, nccl.NCCL_AVG,
                             _handle(self._stream))

    def finish(self):
        self._reduced.record(self._stream)
        self._reduced.wait(self._compute)


def _handle(stream):
    """A numba stream's CUstream as an int (its handle is a ctypes pointer or a
    cuda-python CUstream, by numba's binding)."""
    handle = stream.handle
    return int(getattr(handle, "value", handle) or 0)


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
