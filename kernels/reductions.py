"""Whole-array sums to one float on the device: the logged mean loss and the squared
global gradient norm, so that the host copies back a single float (or nothing at all).

NumPy twins: ``numpy.sum`` and ``microgpt.reference.global_norm`` squared.

Two launches: one thread zeroes the (1,) output, then a grid of at most MAX_BLOCKS blocks
strides over the array, each thread accumulating its float32 partial sum, each block
reducing its threads' partials (kernels.common.block_sum) and adding the block's total to
the output with one atomic. MAX_BLOCKS blocks are enough to keep every SM of an H200
streaming while keeping the atomics (and their rounding) few.
"""
from numba import boolean, cuda, float32

from microgpt.kernels.common import (REDUCE_SCRATCH, WARP, block_sum, ceil_div, check_array,
                                     check_block_size)

BLOCK = 512
MAX_BLOCKS = 1024


# ----------------------------------------------------------------------------------
# kernels

@cuda.jit
def _zero_kernel(out):
    out[0] = float32(0.0)


@cuda.jit
def _sum_kernel(out, x, square):
    # out (1,) += sum of x (n,), or of its squares; out must start at 0
    scratch = cuda.shared.array(REDUCE_SCRATCH, float32)
    partial = float32(0.0)
    for i in range(cuda.grid(1), x.size, cuda.gridsize(1)):
        value = x[i]
        partial += value * value if square else value
    block_total = block_sum(partial, scratch)
    if cuda.threadIdx.x == 0:
        cuda.atomic.add(out, 0, block_total)


PTX_SIGNATURES = [
    (_zero_kernel, (float32[::1],)),
    (_sum_kernel, (float32[::1], float32[::1], boolean)),
]


# ----------------------------------------------------------------------------------
# launchers

def _launch_sum(out, x, square, stream, block, max_blocks):
    check_block_size(block, WARP)
    if len(x.shape) != 1:
        raise ValueError(f"x: expected a flat (n,) array, got shape {tuple(x.shape)}")
    check_array("x", x, x.shape)
    check_array("out", out, (1,))
    if max_blocks < 1:
        raise ValueError(f"max_blocks must be at least 1, got {max_blocks}")
    grid = max(1, min(ceil_div(x.size, block), max_blocks))
    _zero_kernel[1, 1, stream](out)
    _sum_kernel[grid, block, stream](out, x, square)


def sum_to(out, x, *, stream=0, block=BLOCK, max_blocks=MAX_BLOCKS):
    """out (1,) = sum of x (n,), accumulated in float32 on the device."""
    _launch_sum(out, x, False, stream, block, max_blocks)


def sum_squares_to(out, x, *, stream=0, block=BLOCK, max_blocks=MAX_BLOCKS):
    """out (1,) = sum of the squares of x (n,), accumulated in float32 on the device."""
    _launch_sum(out, x, True, stream, block, max_blocks)
