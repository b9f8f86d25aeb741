"""The CUDA backend: the NumpyBackend's methods, run by the kernels in microgpt.kernels.

Arrays are numba device arrays (float32, token ids int32) and stay on the GPU; the only
device-to-host copies are to_host calls, which the model makes for the values it reports
(the loss, the gradient norm) and for state_dict. Every kernel is launched on one stream.
"""
import functools

import numpy as np
from numba import cuda
from numba.cuda.cudadrv import driver

from microgpt.backend import BackendError, cuda_available
from microgpt.kernels import (adamw, attention, crossentropy, elementwise, embedding, gemm,
                              heads, kv_cache, layernorm, reductions)
from microgpt.kernels.common import SIMULATOR


def _on_stream(launcher):
    """A backend method that runs a kernel launcher on the backend's stream."""
    @functools.wraps(launcher)
    def op(self, *args, **kwargs):
        return launcher(*args, stream=self.stream, **kwargs)
    return op


class CudaBackend:
    name = "cuda"
    dtype = np.dtype(np.float32)

    def __init__(self):
        if not (SIMULATOR or cuda_available()):
            raise BackendError("no usable CUDA GPU found; use --device cpu (or check the "
                               "NVIDIA driver with nvidia-smi)")
        self.stream = cuda.default_stream()
        self._scalar = cuda.device_array((1,), np.float32)

    # memory ------------------------------------------------------------------------
    def zeros(self, shape, dtype=None):
        arr = cuda.device_array(shape, dtype or self.dtype, stream=self.stream)
        self.fill_zero(arr)
        return arr

    def to_device(self, host):
        dtype = np.int32 if host.dtype.kind in "iu" else self.dtype
        return cuda.to_device(np.ascontiguousarray(host, dtype=dtype), stream=self.stream)

    def to_host(self, arr):
        host = arr.copy_to_host(stream=self.stream)
        self.stream.synchronize()
        return host

    def copy(self, dst, src):
        dst.copy_to_device(src, stream=self.stream)

    def fill_zero(self, arr):
        if SIMULATOR:   # the simulator has no driver memset
            arr.copy_to_device(np.zeros(arr.shape, arr.dtype))
        else:
            driver.device_memset(arr, 0, arr.nbytes, stream=self.stream)

    def synchronize(self):
        self.stream.synchronize()

    # the ops: the same names and arguments as NumpyBackend ----------------------------
    encoder_forward = _on_stream(embedding.encoder_forward)
    encoder_backward = _on_stream(embedding.encoder_backward)
    layernorm_forward = _on_stream(layernorm.layernorm_forward)
    layernorm_backward = _on_stream(layernorm.layernorm_backward)
    matmul = _on_stream(gemm.matmul)
    split_heads_forward = _on_stream(heads.split_heads_forward)
    split_heads_backward = _on_stream(heads.split_heads_backward)
    merge_heads_forward = _on_stream(heads.merge_heads_forward)
    merge_heads_backward = _on_stream(heads.merge_heads_backward)
    attention_forward = _on_stream(attention.attention_forward)
    attention_backward = _on_stream(attention.attention_backward)
    residual_forward = _on_stream(elementwise.residual_forward)
    gelu_forward = _on_stream(elementwise.gelu_forward)
    gelu_backward = _on_stream(elementwise.gelu_backward)
    crossentropy_forward = _on_stream(crossentropy.crossentropy_forward)
    crossentropy_backward = _on_stream(crossentropy.crossentropy_backward)
    global_norm_squared = _on_stream(adamw.global_norm_squared)
    adamw_update = _on_stream(adamw.adamw_update)

    def mean(self, x):
        """The mean of x as a Python float: reduced on the device, one float copied back."""
        reductions.sum_to(self._scalar, x.reshape(x.size), stream=self.stream)
        return float(self.to_host(self._scalar)[0]) / x.size

    # generation: the KV cache (microgpt.generate)
    kv_cache_write = _on_stream(kv_cache.kv_cache_write)
    attention_cached_forward = _on_stream(kv_cache.attention_cached_forward)
