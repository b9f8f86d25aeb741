"""The CUDA backend: the NumpyBackend's methods, run by the kernels in microgpt.kernels.

Arrays are numba device arrays (float32, token ids int32) and stay on the GPU; the only
device-to-host copies are to_host calls. Every kernel is launched on the backend's own
stream (not the legacy default stream, which cannot be captured), and a sequence of
launches can be captured once into a CUDA graph and replayed (``capture``): one launch
from the host for the whole sequence.
"""
import functools
import importlib
import inspect

import numpy as np
from numba import cuda
from numba.cuda.cudadrv import devicearray

from microgpt.errors import BackendError
from microgpt.kernels import common, reductions
from microgpt.kernels.attention import flash
from microgpt.kernels.common import SIMULATOR
from microgpt.kernels.gemm import turns
from microgpt.ops import OPS


# the ops that may run while the deterministic split-K's add_parts still adds a weight
# gradient beside the stream (gemm.turns.beside): they neither read nor write a matrix's
# gradient (a product that adds into one joins it first, in the GEMM's launcher); every
# other op, and to_host, fetch and synchronize, waits for it (gemm.turns.join)
BESIDE_ADD_PARTS = {"layernorm_forward", "residual_layernorm_forward", "layernorm_backward",
                    "matmul", "matmul_gelu_forward", "matmul_gelu_backward", "bias_backward",
                    "split_heads_forward", "split_heads_backward", "merge_heads_forward",
                    "merge_heads_backward", "attention_forward", "attention_backward",
                    "residual_forward", "gelu_forward", "gelu_backward",
                    "crossentropy_forward", "crossentropy_forward_backward"}


def _on_stream(launcher, beside=False):
    """A backend method that runs a kernel launcher on the backend's stream, after the work
    beside it unless beside (BESIDE_ADD_PARTS); a launcher with a deterministic option (the
    GEMM's split-K, the embedding's backward) is told."""
    exact = "deterministic" in inspect.signature(launcher).parameters

    @functools.wraps(launcher)
    def op(self, *args, **kwargs):
        if exact:
            kwargs.setdefault("deterministic", self.deterministic)
        if not beside:
            turns.join(self.stream)
        return launcher(*args, stream=self.stream, **kwargs)
    return op


class CudaBackend:
    name = "cuda"
    dtype = np.dtype(np.float32)
    graphs = not SIMULATOR      # the simulator runs each launch at once: nothing to capture

    def __init__(self, deterministic=False):
        """deterministic: the same bits for the same inputs every run (split-K's parts
        added in a fixed order, the embedding's backward without float atomics)."""
        if not cuda.is_available():
            raise BackendError("no usable CUDA GPU found; use --device cpu (or check the "
                               "NVIDIA driver with nvidia-smi)")
        self.stream = cuda.stream()
        self.deterministic = deterministic
        # mma.sync on bf16 and cp.async, which the bf16 GEMM and flash attention use, need
        # compute capability 8.0; the simulator runs their twins, but slowly
        self.bf16_tensor_cores = (not SIMULATOR and
                                  cuda.get_current_device().compute_capability >= (8, 0))
        self._scalar = cuda.device_array((1,), np.float32)

    @staticmethod
    def bf16_fits(head_dim):
        """Whether the bf16 kernels take heads this wide (flash attention's tiles fit)."""
        return flash.fits(head_dim)

    # memory ------------------------------------------------------------------------
    def zeros(self, shape, dtype=None):
        arr = cuda.device_array(shape, dtype or self.dtype, stream=self.stream)
        self.fill_zero(arr)
        return arr

    def to_device(self, host):
        dtype = np.int32 if host.dtype.kind in "iu" else self.dtype
        return cuda.to_device(np.ascontiguousarray(host, dtype=dtype), stream=self.stream)

    def to_host(self, arr):
        turns.join(self.stream)
        host = arr.copy_to_host(stream=self.stream)
        self.stream.synchronize()
        return host

    def copy(self, dst, src):
        dst.copy_to_device(src, stream=self.stream)

    def host_buffer(self, shape, dtype):
        """A page-locked host array, which fetch fills without holding the host up."""
        return cuda.pinned_array(shape, dtype)

    def fetch(self, host, arr):
        """Enqueue arr's copy into host (a host_buffer) -> an event: its synchronize()
        returns once host holds it. The host goes on meanwhile (generation enqueues its
        next step before it reads a step's tokens)."""
        turns.join(self.stream)
        arr.copy_to_host(host, stream=self.stream)
        event = cuda.event()
        event.record(self.stream)
        return event

    def fill_zero(self, arr):
        common.fill_zero(arr, self.stream)

    def synchronize(self):
        turns.join(self.stream)
        self.stream.synchronize()

    def join(self):
        """The stream waits for the work enqueued beside it (gemm.turns.join): before a
        gradient's range is handed to a data-parallel sync."""
        turns.join(self.stream)

    def heads_view(self, fused, part, n_head, head_dim):
        """As NumpyBackend.heads_view, a view of the same memory; numba's device arrays
        transpose in two dimensions only, so the (B, H, T, D) array is made from fused's
        strides and the part's offset. (numba's own slicing of the (B, T, parts, H, D)
        reshape walks the extent of every element in Python: 19 s of andrea-120m's start
        on the H200, for its 34 views.)"""
        B, T, width = fused.shape
        if SIMULATOR:
            return fused.reshape(B, T, -1, n_head, head_dim)[:, :, part].transpose((0, 2, 1, 3))
        sb, st, se = fused.strides
        if width % (n_head * head_dim) or se != fused.dtype.itemsize:
            raise ValueError(f"heads_view: a (B, T, parts x {n_head} x {head_dim}) array "
                             f"with contiguous rows, not shape {fused.shape} strides "
                             f"{fused.strides}")
        return devicearray.DeviceNDArray(
            (B, n_head, T, head_dim), (sb, head_dim * se, st, se), fused.dtype,
            stream=self.stream, gpu_data=fused.gpu_data.view(part * n_head * head_dim * se))

    def mean(self, x):
        """The mean of x as a Python float: reduced on the device, one float copied back."""
        reductions.sum_to(self._scalar, x.reshape(x.size), stream=self.stream)
        return float(self.to_host(self._scalar)[0]) / x.size

    # graphs ------------------------------------------------------------------------
    def capture(self, enqueue):
        """Run enqueue() with this stream in capture mode -> a Graph of the work it
        launched, which runs only when replayed. Run enqueue once eagerly first: a first
        launch compiles its kernel, and the arguments of every launch are fixed at capture,
        so what enqueue launches must not depend on values that change later."""
        from cuda.bindings import driver as cu

        stream = cu.CUstream(int(self.stream.handle))
        _check(cu.cuStreamBeginCapture(
            stream, cu.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED))
        try:
            enqueue()
        finally:
            graph = _check(cu.cuStreamEndCapture(stream))
        return Graph(_check(cu.cuGraphInstantiate(graph, 0)), graph, stream)


class Graph:
    """A captured sequence of launches, replayed on the stream it was captured on."""

    def __init__(self, executable, graph, stream):
        from cuda.bindings import driver as cu

        self._executable, self._graph, self._stream = executable, graph, stream
        # bound now: a graph alive at the interpreter's exit is destroyed when imports no
        # longer work (an import in __del__ printed an ImportError there)
        self._launch, self._destroy = cu.cuGraphLaunch, (cu.cuGraphExecDestroy,
                                                          cu.cuGraphDestroy)

    def replay(self):
        _check(self._launch(self._executable, self._stream))

    def __del__(self):
        destroy_executable, destroy_graph = self._destroy
        destroy_executable(self._executable)
        destroy_graph(self._graph)


def _check(result):
    """cuda.bindings returns (status, value...): raise on an error, else the value."""
    status, *values = result
    if int(status) != 0:
        from cuda.bindings import driver as cu
        _, name = cu.cuGetErrorName(status)
        raise RuntimeError(f"CUDA graph call failed: {name.decode() if name else status}")
    return values[0] if len(values) == 1 else None


# the ops, derived from the one declaration of the op set
for _name, _module in OPS.items():
    setattr(CudaBackend, _name, _on_stream(
        getattr(importlib.import_module(f"microgpt.kernels.{_module}"), _name),
        _name in BESIDE_ADD_PARTS))
