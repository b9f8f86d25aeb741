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
block defaults to 256 threads, fewer (whole warps) when a fused row is shorter.
"""
import functools

from numba import cuda, float32

from microgpt.kernels.common import ceil_div, check_array, check_block_size, row_block

BLOCK = 256


@functools.cache
def _head_copy_kernel(to_heads, H, D):
    @cuda.jit
    def head_copy_kernel(fused, q, k, v):
        # fused (B, T, P*C); q, k, v (B, H, T, D), of which the first P are used
        col = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
        t, b = cuda.blockIdx.y, cuda.blockIdx.z
        if col >= fused.shape[2]:
            return
        part_head = col // D
        d = col - part_head * D
        part = part_head // H
        h = part_head - part * H
        heads = q if part == 0 else (k if part == 1 else v)
        if to_heads:
            heads[b, h, t, d] = fused[b, t, col]
        else:
            fused[b, t, col] = heads[b, h, t, d]

    return head_copy_kernel


_HEADS = float32[:, :, :, ::1]
PTX_SIGNATURES = [(_head_copy_kernel(to_heads, H, D), (float32[:, :, ::1],) + (_HEADS,) * 3)
                  for to_heads in (True, False)
                  for H, D in [(12, 64), (3, 72)]]     # andrea-120m's heads; an odd D


def _copy(to_heads, fused_name, fused, head_names, heads, block, stream):
    """Check shapes, then launch the copy between fused (B, T, P*C) and the P arrays of
    heads, each (B, H, T, D)."""
    if len(heads[0].shape) != 4:
        raise ValueError(f"{head_names[0]}: expected shape (B, H, T, D), "
                         f"got {tuple(heads[0].shape)}")
    B, H, T, D = heads[0].shape
    for name, arr in zip(head_names, heads):
        check_array(name, arr, (B, H, T, D))
    width = len(heads) * H * D
    check_array(fused_name, fused, (B, T, width))
    if block is None:
        block = row_block(width, BLOCK)
    check_block_size(block)
    if fused.size == 0:
        return
    grid = (ceil_div(width, block), T, B)
    q, k, v = heads * (3 // len(heads))    # merge passes its one array in all three slots
    _head_copy_kernel(to_heads, H, D)[grid, block, stream](fused, q, k, v)


def split_heads_forward(q, k, v, qkv, *, block=None, stream=0):
    """qkv (B, T, 3C) -> q, k, v each (B, H, T, D); H is read from q's shape."""
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
