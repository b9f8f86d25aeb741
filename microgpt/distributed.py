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
norms; then wte, whose gradient's writers are the tied head's dW, first in the
backward, and the encoder's scatter, last), ``finish()`` at its end, after which, in the
device's order of work, the buffer holds the mean over the ranks. On the cuda backend each
range is all-reduced on a
stream of its own while the backward goes on (NCCLGradients); on numpy at once, in place.

With ``--zero 1`` (microgpt.zero) the optimizer's state is sharded over the ranks, and the
world's sharded sync (``world.sharded_sync(model, shards)``) reduces each range to the
ranks that own its pieces instead, adds the ranks' squared norms and gathers the updated
parameters from their owners (MPIShardedGradients, NCCLShardedGradients).
docs/distributed.md has the launch on one host and on several.
"""
import os

import numpy as np

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
    rank, world_size, hosts = 0, 1, 1

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
        from mpi4py import MPI
        self.comm = comm
        self.rank, self.world_size = comm.Get_rank(), comm.Get_size()
        # the rank among those of its host (what MPI can share memory with): on cuda, the
        # GPU it takes; and the hosts, as many as ranks that are first on theirs
        self.local_rank = comm.Split_type(MPI.COMM_TYPE_SHARED).Get_rank()
        self.hosts = comm.allreduce(int(self.local_rank == 0))

    def gradient_sync(self, model):
        return MPIGradients(self.comm, model.grads_flat)

    def sharded_sync(self, model, shards):
        return MPIShardedGradients(self.comm, model, shards)

    def gather_shards(self, part, shards):
        """The whole host array on rank 0, from every rank's part (its shard of it, in
        shards' bounds); None on the others."""
        whole = np.empty(shards.bounds[-1], part.dtype) if self.rank == 0 else None
        counts = [hi - lo for lo, hi in zip(shards.bounds, shards.bounds[1:])]
        self.comm.Gatherv(np.ascontiguousarray(part),
                          (whole, (counts, shards.bounds[:-1])) if self.rank == 0 else None,
                          root=0)
        return whole

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
        from numba import cuda
        if self.local_rank >= len(cuda.gpus):
            raise DistributedError(f"local rank {self.local_rank} has no GPU ({len(cuda.gpus)} "
                                   "visible): start at most one rank per GPU of each host")
        cuda.select_device(self.local_rank)
        try:
            from cupy.cuda import nccl
        except ImportError:
            raise DistributedError("data parallelism on cuda needs CuPy's NCCL binding: "
                                   "pip install cupy-cuda13x") from None
        self._nccl = nccl
        uid = comm.bcast(nccl.get_unique_id() if self.rank == 0 else None, root=0)
        self._nccl_comm = nccl.NcclCommunicator(self.world_size, uid, self.rank)

    def gradient_sync(self, model):
        return NCCLGradients(self._nccl, self._nccl_comm, model.grads_flat,
                             model.backend.stream)

    def sharded_sync(self, model, shards):
        return NCCLShardedGradients(self._nccl, self._nccl_comm, model, shards)


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


class MPIShardedGradients(MPIGradients):
    """ZeRO-1's collectives over MPI (the numpy backend): each range's pieces averaged on
    the ranks that own them (the other ranks keep their own gradient there, which no one
    reads), the ranks' squared norms added in rank order, and every shard of the updated
    parameters sent from its owner to the others."""

    def __init__(self, comm, model, shards):
        super().__init__(comm, model.grads_flat)
        self.shards, self.params = shards, model.params_flat

    def ready(self, lo, hi):
        from mpi4py import MPI
        for root, a, b in self.shards.owners(lo, hi):
            part = self.flat[a:b]
            if root == self.shards.rank:
                self.comm.Reduce(MPI.IN_PLACE, part, op=MPI.SUM, root=root)
                part /= self.comm.Get_size()
            else:
                self.comm.Reduce(part, None, op=MPI.SUM, root=root)

    def total(self, out, part):
        """out (1,) = the sum of every rank's part (1,), in rank order: the same on all."""
        out[0] = sum(self.comm.allgather(float(part[0])))

    def gather(self):
        for root in range(self.shards.world_size):
            lo, hi = self.shards.span(root)
            if lo < hi:
                self.comm.Bcast(self.params[lo:hi], root=root)


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
        self._base = _address(flat)
        self._itemsize = flat.dtype.itemsize
        self._stream = cuda.stream()
        self._written = cuda.event(timing=False)
        self._reduced = cuda.event(timing=False)

    def ready(self, lo, hi):
        self._written.record(self._compute)
        self._written.wait(self._stream)
        self._reduce(lo, hi)

    def _reduce(self, lo, hi):
        nccl = self._nccl
        ptr = self._base + lo * self._itemsize
        self._comm.allReduce(ptr, ptr, hi - lo, nccl.NCCL_FLOAT32, nccl.NCCL_AVG,
                             _handle(self._stream))

    def finish(self):
        self._reduced.record(self._stream)
        self._reduced.wait(self._compute)


class NCCLShardedGradients(NCCLGradients):
    """ZeRO-1's collectives over NCCL (the cuda backend). Each range's pieces are reduced
    (ncclAvg) to the ranks that own them, on the sync's stream beside the backward, the
    pieces of one range in one NCCL group; the ranks' squared norms are added by an
    all-reduce of one float, whose one sum every rank receives (the same bits); and each
    shard of the updated parameters, the float32 ones and the bf16 copy of the matrices,
    is broadcast from its owner, all in one group. The total and the gather run on the
    compute stream, in the order of the update, and are captured with the step."""

    def __init__(self, nccl, comm, model, shards):
        super().__init__(nccl, comm, model.grads_flat, model.backend.stream)
        self.shards = shards
        # what the gather sends: (array, its elements, NCCL's type of its elements); the
        # bf16 copy travels as float16, whose bits a broadcast moves unread
        self._gathered = [(model.params_flat, model.layout.size, nccl.NCCL_FLOAT32)]
        if model.matrices_flat is not None:
            self._gathered.append((model.matrices_flat, model.layout.n_decay,
                                   nccl.NCCL_FLOAT16))

    def _reduce(self, lo, hi):
        nccl, stream = self._nccl, _handle(self._stream)
        nccl.groupStart()
        for root, a, b in self.shards.owners(lo, hi):
            ptr = self._base + a * self._itemsize
            self._comm.reduce(ptr, ptr, b - a, nccl.NCCL_FLOAT32, nccl.NCCL_AVG, root, stream)
        nccl.groupEnd()

    def total(self, out, part):
        """out (1,) = the sum of every rank's part (1,)."""
        nccl = self._nccl
        self._comm.allReduce(_address(part), _address(out), 1, nccl.NCCL_FLOAT32,
                             nccl.NCCL_SUM, _handle(self._compute))

    def gather(self):
        nccl, stream = self._nccl, _handle(self._compute)
        nccl.groupStart()
        for array, size, dtype in self._gathered:
            base, itemsize = _address(array), array.dtype.itemsize
            for root in range(self.shards.world_size):
                lo, hi = self.shards.span(root)
                hi = min(hi, size)
                if lo < hi:
                    ptr = base + lo * itemsize
                    self._comm.broadcast(ptr, ptr, hi - lo, dtype, root, stream)
        nccl.groupEnd()


def _address(array):
    """A device array's first element's address."""
    return array.__cuda_array_interface__["data"][0]


def _handle(stream):
    """A numba stream's CUstream as an int (its handle is a ctypes pointer or a
    cuda-python CUstream, by numba's binding)."""
    handle = stream.handle
    return int(getattr(handle, "value", handle) or 0)


def launched_by_mpi():
    return any(k in os.environ for k in ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK",
                                         "MPI_LOCALNRANKS"))


def init(backend):
    """The world this process belongs to; backend is "numpy" or "cuda".

    Outside mpirun (or with one rank) this is SingleProcess. On cuda, each rank selects the
    GPU of its local rank before any CUDA memory is allocated."""
    if not launched_by_mpi():
        return SingleProcess()
    try:
        from mpi4py import MPI
    except ImportError:
        raise DistributedError("launched by mpirun but mpi4py is missing: "
                               "pip install 'microgpt-engine[mpi]'") from None
    comm = MPI.COMM_WORLD
    if comm.Get_size() == 1:
        return SingleProcess()
    return MPIWorld(comm) if backend == "numpy" else NCCLWorld(comm)
