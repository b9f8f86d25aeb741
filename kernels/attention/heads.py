"""Split heads / merge heads: the reshape + transpose on either side of attention.

NumPy twins: ``microgpt.reference.split_heads_forward`` / ``split_heads_backward`` and
``merge_heads_forward`` / ``merge_heads_backward``.

All four are one copy between a fused row layout, fused (B, T, P*C) with P = 3 parts
(q, k, v: the fused QKV projection's output) or P = 1 (the merged heads that W_O mixes),
and the per-head layout (B, H, T, D), one array per part, each head's T x D slice
contiguous. Column c of a fused row is part c // C, head (c % C) // D, dim c % D.
split forward and merge backward copy fused -> heads; split backward and merge forward
copy heads -> fused. The direction, H and D are compile-time constants of one kernel
body (H and D are fixed per model), so the index arithmetic divides by constants.

Launch: grid (ceil(P*C / block), T, B), one thread per fused element, so reads or writes
of the fused side are fully coalesced and the per-head side moves in contiguous runs of D.
block defaults to 256 threads, fewer (whole warps) when a fused row is shorter. When every
array has one dtype (the bf16 step's copies are bf16 to bf16, the float32 step's float32
to float32) nothing is converted, and the launcher views the arrays as 8-byte words (4
bf16 or 2 float32 elements, when a head's row of D divides into them): the same kernel
then moves a word per thread, a quarter (bf16) or half of the threads, loads and stores.

Mixed precision: every array may be float32 or bf16 (a uint16 array, kernels/precision.py),
each on its own, so that the copy is also the cast and no cast launch exists: the QKV
GEMM's output (either) splits into bf16 q, k, v for flash attention, and flash
attention's bf16 output merges into the W_O GEMM's bf16 operand; in the backward, merge
backward turns the W_O dX GEMM's result (either) into flash attention's bf16 dout, and
split backward its bf16 dq, dk, dv into dqkv, the bf16 (or float32) operand of the QKV
GEMM's dX and dW. A bf16 value read into float32 is exact and a float32 value written to
bf16 is rounded once to nearest even, so the twins are the reference's copies with the
values rounded as the output holds them.
"""
import functools

import numpy as np
from numba import cuda, float32, uint16, uint64

from ..atoms import copy_element
from ..cache import jit
from ..common import ceil_div, check_block_size, device_address, row_block
from ..precision import check_activation

BLOCK = 256


@functools.cache
def _head_copy_kernel(to_heads, H, D):
    @cuda.jit(device=True, inline=True)
    def copy_part(fused, b, t, col, heads, h, d):
        # one call per part, so that q, k and v need not share a dtype (numba would have
        # to unify them into one variable to pick the part's array)
        if to_heads:
            copy_element(heads, (b, h, t, d), fused, (b, t, col))
        else:
            copy_element(fused, (b, t, col), heads, (b, h, t, d))

    @jit
    def head_copy_kernel(fused, q, k, v):
        # fused (B, T, P*C); q, k, v (B, H, T, D), of which the first P are used; each
        # float32 or bf16
        col = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
        t, b = cuda.blockIdx.y, cuda.blockIdx.z
        if col >= fused.shape[2]:
            return
        part_head = col // D
        d = col - part_head * D
        part = part_head // H
        h = part_head - part * H
        if part == 0:
            copy_part(fused, b, t, col, q, h, d)
        elif part == 1:
            copy_part(fused, b, t, col, k, h, d)
        else:
            copy_part(fused, b, t, col, v, h, d)

    return head_copy_kernel


_F32, _BF16, _WORDS = float32[:, :, ::1], uint16[:, :, ::1], uint64[:, :, ::1]
_F32_HEADS, _BF16_HEADS = (float32[:, :, :, ::1],) * 3, (uint16[:, :, :, ::1],) * 3
_WORD_HEADS = (uint64[:, :, :, ::1],) * 3
# the dtypes of the bf16 step's copies, by direction (the float32 step's are all float32):
# to heads, split forward (qkv -> q, k, v) and merge backward (dout -> dy): bf16 heads from
# a float32 or bf16 GEMM result; to fused, split backward (dq, dk, dv -> dqkv) and merge
# forward (y -> out): bf16 heads into a bf16 GEMM operand, or into a float32 dqkv, or
# float32 heads (the float32 attention's) into a bf16 operand
_BF16_COPIES = [(True, _F32, _BF16_HEADS), (True, _BF16, _BF16_HEADS),
                (False, _BF16, _BF16_HEADS), (False, _F32, _BF16_HEADS),
                (False, _BF16, _F32_HEADS)]
PTX_SIGNATURES = (
    [(_head_copy_kernel(to_heads, H, D), (_F32,) + _F32_HEADS)
     for to_heads in (True, False)
     for H, D in [(12, 64), (3, 72)]] +      # andrea-120m's heads; an odd D
    [(_head_copy_kernel(to_heads, 12, 64), (fused,) + per_head)
     for to_heads, fused, per_head in _BF16_COPIES] +
    # a copy between arrays of one dtype, in 8-byte words: andrea-120m's heads of 64 bf16
    # (16 words) or float32 (32 words)
    [(_head_copy_kernel(to_heads, 12, words), (_WORDS,) + _WORD_HEADS)
     for to_heads in (True, False) for words in (16, 32)])


def _word_dtype(arrays, D):
    """The widest unsigned word (8, 4 or 2 bytes) that holds a whole number of elements of
    the arrays' one dtype, divides a head's row of D of them and to whose size every
    array's start is aligned (a view may start mid-word)."""
    itemsize = arrays[0].dtype.itemsize
    for word in (np.uint64, np.uint32, np.uint16):
        size = np.dtype(word).itemsize
        if (size >= itemsize and D % (size // itemsize) == 0 and
                all(device_address(arr) % size == 0 for arr in arrays)):
            return np.dtype(word)
    return arrays[0].dtype


def _copy(to_heads, fused_name, fused, head_names, heads, block, stream):
    """Check shapes and dtypes (each array float32 or bf16), then launch the copy between
    fused (B, T, P*C) and the P arrays of heads, each (B, H, T, D)."""
    if len(heads[0].shape) != 4:
        raise ValueError(f"{head_names[0]}: expected shape (B, H, T, D), "
                         f"got {tuple(heads[0].shape)}")
    B, H, T, D = heads[0].shape
    for name, arr in zip(head_names, heads):
        check_activation(name, arr, (B, H, T, D))
    width = len(heads) * H * D
    check_activation(fused_name, fused, (B, T, width))
    if len({arr.dtype for arr in (fused, *heads)}) == 1:
        # nothing to convert: move the bits in words of as many elements as a head's
        # row divides into (4 bf16 or 2 float32 in 8 bytes): fewer, wider accesses
        word = _word_dtype((fused, *heads), D)
        per_word = word.itemsize // fused.dtype.itemsize
        fused, heads = fused.view(word), tuple(arr.view(word) for arr in heads)
        width, D = width // per_word, D // per_word
    if block is None:
        block = row_block(width, BLOCK)
    check_block_size(block)
    if fused.size == 0:
        return
    grid = (ceil_div(width, block), T, B)
    q, k, v = heads * (3 // len(heads))    # merge passes its one array in all three slots
    _head_copy_kernel(to_heads, H, D)[grid, block, stream](fused, q, k, v)


def split_heads_forward(q, k, v, qkv, *, block=None, stream=0):
    """qkv (B, T, 3C) -> q, k, v each (B, H, T, D); H is read from q's shape. Each array
    float32 or bf16, as in the other three copies."""
    _copy(True, "qkv", qkv, ("q", "k", "v"), (q, k, v), block, stream)


def split_heads_backward(dqkv, dq, dk, dv, *, block=None, stream=0):
    """dq, dk, dv (B, H, T, D) -> dqkv (B, T, 3C), overwritten."""
    _copy(False, "dqkv", dqkv, ("dq", "dk", "dv"), (dq, dk, dv), block, stream)


def merge_heads_forward(out, y, *, block=None, stream=0):
    """y (B, H, T, D) -> out (B, T, C), heads side by side."""
    _copy(False, "out", out, ("y",), (y,), block, stream)


def merge_heads_backward(dy, dout, *, block=None, stream=0):
    """dout (B, T, C) -> dy (B, H, T, D); H is read from dy's shape."""
    _copy(True, "dout", dout, ("dy",), (dy,), block, stream)
