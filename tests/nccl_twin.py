"""A twin of CuPy's NCCL binding for the CUDA simulator: each NCCL call the cuda backend's
data parallelism makes (microgpt.distributed) is done by MPI on the host memory that the
simulator's device arrays are, at the same addresses, counts, types and roots. So the NCCL
path (which pieces go where, by which pointer) runs on a CPU, under mpiexec, with what
NCCL itself would do:

- reduce: the root's recvbuff receives the sum (or the mean) of every rank's sendbuff; the
  other ranks' recvbuff is not written (NCCL: "only used on root");
- allReduce: every rank's recvbuff receives it; broadcast: every rank's recvbuff receives
  the root's sendbuff, the bits unread;
- groupStart / groupEnd: the calls between them are issued in the same order on every
  rank, so MPI matches them as NCCL's group would; an unbalanced pair fails.

install() puts it where ``from cupy.cuda import nccl`` finds it and fills the simulator's
gaps that the NCCL path meets: its arrays have no __cuda_array_interface__ (their host
address is the device address here), its streams no handle, and its cuda.event() takes no
timing flag.
"""
import ctypes
import sys
import types

import numpy as np
from mpi4py import MPI

NCCL_FLOAT16, NCCL_FLOAT32 = 6, 7
NCCL_SUM, NCCL_AVG = 0, 4
DTYPES = {NCCL_FLOAT16: np.float16, NCCL_FLOAT32: np.float32}

groups = []          # the open groupStart()s
calls = []           # (name, count, dtype, root) of every call, for the test to read


def _view(ptr, count, datatype):
    dtype = np.dtype(DTYPES[datatype])
    return np.frombuffer((ctypes.c_char * (count * dtype.itemsize)).from_address(ptr), dtype)


def get_unique_id():
    return (0,) * 128


def groupStart():
    groups.append(True)


def groupEnd():
    if not groups:
        raise RuntimeError("groupEnd without a groupStart")
    groups.pop()


class NcclCommunicator:
    def __init__(self, ndev, commId, rank):
        self.comm = MPI.COMM_WORLD
        assert (ndev, rank) == (self.comm.Get_size(), self.comm.Get_rank())

    def _combined(self, send, op):
        assert op in (NCCL_SUM, NCCL_AVG), op
        total = np.empty_like(send)
        self.comm.Allreduce(send.copy(), total, op=MPI.SUM)
        return total / np.float32(self.comm.Get_size()) if op == NCCL_AVG else total

    def allReduce(self, sendbuf, recvbuf, count, datatype, op, stream):
        assert isinstance(stream, int)
        calls.append(("allReduce", count, datatype, None))
        _view(recvbuf, count, datatype)[:] = self._combined(_view(sendbuf, count, datatype), op)

    def reduce(self, sendbuf, recvbuf, count, datatype, op, root, stream):
        assert isinstance(stream, int)
        calls.append(("reduce", count, datatype, root))
        result = self._combined(_view(sendbuf, count, datatype), op)
        if self.comm.Get_rank() == root:
            _view(recvbuf, count, datatype)[:] = result

    def broadcast(self, sendbuff, recvbuff, count, datatype, root, stream):
        assert isinstance(stream, int)
        calls.append(("broadcast", count, datatype, root))
        data = _view(sendbuff, count, datatype).copy()
        self.comm.Bcast(data, root=root)
        _view(recvbuff, count, datatype)[:] = data


def install():
    from numba import cuda

    from microgpt import distributed
    nccl = types.ModuleType("cupy.cuda.nccl")
    for name, value in list(globals().items()):
        if name.startswith(("NCCL_", "get_unique_id", "group", "NcclCommunicator")):
            setattr(nccl, name, value)
    cupy_cuda = types.ModuleType("cupy.cuda")
    cupy_cuda.nccl = nccl
    sys.modules.update({"cupy": types.ModuleType("cupy"), "cupy.cuda": cupy_cuda,
                        "cupy.cuda.nccl": nccl})
    distributed._address = lambda array: array.__array_interface__["data"][0]
    distributed._handle = lambda stream: 0
    event = cuda.event
    cuda.event = lambda timing=True: event()
