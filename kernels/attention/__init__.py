"""Causal scaled-dot-product attention over all heads at once, forward and backward, and
the kernels around it.

NumPy twins: ``microgpt.reference.attention_forward`` and ``attention_backward``.
``attention_forward`` and ``attention_backward`` route by dtype: float32 heads to the
CUDA cores' kernels (``attention.fp32``, the seed's block per (batch, head)), bf16 heads
(uint16 arrays) to the tensor cores: on Hopper head_dims 64 and 128 at T of at least
``hopper.MIN_T`` to ``attention.hopper`` (the wgmma forward) and, once ``HOPPER_BACKWARD``
is set, ``attention.hopper_backward`` (the wgmma backward), every other to
``attention.flash`` and ``attention.flash_backward`` (mma.sync), with their default tiles.

  fp32       the float32 kernels, one row per thread
  flash      flash attention on the mma.sync tensor cores (bf16): tiles, parts, forward
  flash_backward   its backward: the dq and dk/dv passes
  hopper     flash attention's forward on Hopper's wgmma (bf16, head_dim 64 and 128)
  hopper_backward   its backward there: the dq and dk/dv passes on wgmma
  hopper_operands   their operands: heads as the bulk copies' matrices, the copies, the
             products' issuers
  heads      the fused QKV rows split into heads, and the heads merged back
  kv_cache   generation's cache: its write, and attention of new rows over it
"""
import numpy as np

from . import flash, flash_backward, fp32, hopper, hopper_backward


# Whether the bf16 backward goes to hopper_backward where it takes the heads: the illegal
# instruction of its GPU property test (sessions 20, 21) was the dk/dv pass's bulk copies
# of statistics off a 16-byte boundary; since session 22 their boxes start at the boundary
# before, in 128-byte shared slots, so every T runs there (call A: the property test at
# ragged T over several heads, memcheck and racecheck clean). False sends every bf16
# backward to flash's mma.sync passes.
HOPPER_BACKWARD = True


def _no_geometry(block, blocks_per_head):
    if block is not None or blocks_per_head is not None:
        raise ValueError("block and blocks_per_head set the float32 kernels' geometry; bf16 "
                         "heads take flash attention's tiles")


def attention_forward(out, lse, q, k, v, *, block=None, blocks_per_head=None, stream=0):
    """out (B, H, T, D) = causal softmax(q k^T / sqrt(D)) v per (batch, head); lse (B, H, T)
    = each row's logsumexp of the scaled scores. block: query rows (threads) per block;
    blocks_per_head: 1 for one block per (batch, head), default by shape (``fp32``'s).
    bf16 heads (uint16 arrays) go to the tensor cores with the default tiles: ``hopper``
    where it takes them (sm_90, head_dim 64 or 128, T >= hopper.MIN_T), ``flash``
    otherwise."""
    if q.dtype == np.uint16:
        _no_geometry(block, blocks_per_head)
        if hopper.takes(q, k, v):
            return hopper.hopper_attention_forward(out, lse, q, k, v, stream=stream)
        return flash.flash_attention_forward(out, lse, q, k, v, stream=stream)
    fp32.attention_forward(out, lse, q, k, v, block=block, blocks_per_head=blocks_per_head,
                           stream=stream)


def attention_backward(dq, dk, dv, delta, dout, q, k, v, out, lse, *, block=None,
                       blocks_per_head=None, stream=0):
    """dq, dk, dv (B, H, T, D) and delta (B, H, T) = rowsum(dout * out), overwritten, from
    dout (B, H, T, D) and the forward's q, k, v, out and lse; P is recomputed from q, k
    and lse. block and blocks_per_head as attention_forward's, for both of ``fp32``'s
    launches; bf16 heads (delta stays float32) go to ``hopper_backward`` where it takes them
    and ``HOPPER_BACKWARD`` is set, ``flash_backward`` otherwise, with their default tiles."""
    if q.dtype == np.uint16:
        _no_geometry(block, blocks_per_head)
        arrays = (dq, dk, dv, delta, dout, q, k, v, out, lse)
        if HOPPER_BACKWARD and hopper_backward.takes(*arrays):
            return hopper_backward.hopper_attention_backward(*arrays, stream=stream)
        return flash_backward.flash_attention_backward(*arrays, stream=stream)
    fp32.attention_backward(dq, dk, dv, delta, dout, q, k, v, out, lse, block=block,
                            blocks_per_head=blocks_per_head, stream=stream)
