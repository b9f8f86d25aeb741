"""Token + position embedding, forward and backward (the "encoder", as llm.c calls it).

NumPy twins: ``microgpt.reference.encoder_forward`` and ``encoder_backward``.

Forward: one thread per output element, out[b, t, c] = wte[idx[b, t], c] + wpe[t, c].
Backward, fused into one launch: one thread per (t, c) walks the batch, scatter-adding
each dout[b, t, c] into dwte[idx[b, t], c] with an atomic (the same token may appear
anywhere in the batch, and wte also receives the tied LM head's gradient) and summing the
batch for dwpe[t, c], which the thread owns alone, so that part needs no atomic.
Consecutive threads take consecutive c, so every read and every atomic is coalesced.
"""
import numpy as np
from numba import cuda, float32, int32

from .cache import jit
from .common import ceil_div, check_array, check_block_size

BLOCK = 256


# ----------------------------------------------------------------------------------
# kernels

@jit
def _encoder_forward_kernel(out, idx, wte, wpe):
    # out (B, T, C), idx (B, T) int32, wte (V, C), wpe (context, C)
    B, T, C = out.shape
    i = cuda.grid(1)
    if i < B * T * C:
        bt, c = divmod(i, C)
        b, t = divmod(bt, T)
        out[b, t, c] = wte[idx[b, t], c] + wpe[t, c]


@jit
def _encoder_backward_kernel(dwte, dwpe, dout, idx):
    # dwte (V, C) +=, dwpe (context, C) +=, dout (B, T, C), idx (B, T) int32
    B, T, C = dout.shape
    i = cuda.grid(1)
    if i < T * C:
        t, c = divmod(i, C)
        batch_sum = float32(0.0)
        for b in range(B):
            g = dout[b, t, c]
            batch_sum += g
            cuda.atomic.add(dwte, (idx[b, t], c), g)
        dwpe[t, c] += batch_sum


PTX_SIGNATURES = [
    (_encoder_forward_kernel, (float32[:, :, ::1], int32[:, ::1], float32[:, ::1],
                               float32[:, ::1])),
    (_encoder_backward_kernel, (float32[:, ::1], float32[:, ::1], float32[:, :, ::1],
                                int32[:, ::1])),
]


# ----------------------------------------------------------------------------------
# launchers

def _check_shapes(out_name, out, idx, wte, wpe, wte_name, wpe_name):
    """The shapes both passes share; returns (B, T, C). Token ids are not range-checked
    here (that would copy them to the host): the model checks them when they arrive."""
    if len(idx.shape) != 2:
        raise ValueError(f"idx: expected shape (B, T), got {tuple(idx.shape)}")
    B, T = idx.shape
    if len(wte.shape) != 2:
        raise ValueError(f"{wte_name}: expected shape (V, C), got {tuple(wte.shape)}")
    V, C = wte.shape
    check_array("idx", idx, (B, T), np.int32)
    check_array(wte_name, wte, (V, C))
    if len(wpe.shape) != 2 or wpe.shape[1] != C or wpe.shape[0] < T:
        raise ValueError(f"{wpe_name}: expected shape (context >= {T}, {C}), "
                         f"got {tuple(wpe.shape)}")
    check_array(wpe_name, wpe, wpe.shape)
    check_array(out_name, out, (B, T, C))
    return B, T, C


def encoder_forward(out, idx, wte, wpe, *, stream=0, block=BLOCK):
    """out (B, T, C) = wte[idx] + wpe[:T]; idx (B, T) int32, wte (V, C), wpe (context, C)."""
    check_block_size(block)
    B, T, C = _check_shapes("out", out, idx, wte, wpe, "wte", "wpe")
    if out.size == 0:
        return
    _encoder_forward_kernel[ceil_div(B * T * C, block), block, stream](out, idx, wte, wpe)


def encoder_backward(dwte, dwpe, dout, idx, *, stream=0, block=BLOCK):
    """dwte (V, C) += scatter-add of dout (B, T, C) by token; dwpe[:T] += dout summed over
    the batch. Both accumulate: zero them first for a plain gradient."""
    check_block_size(block)
    B, T, C = _check_shapes("dout", dout, idx, dwte, dwpe, "dwte", "dwpe")
    if dout.size == 0:
        return
    _encoder_backward_kernel[ceil_div(T * C, block), block, stream](dwte, dwpe, dout, idx)
