"""Activations held in float32 or in bf16: one kernel body reads and writes either.

bf16 arrays are uint16 device arrays of the bit patterns (``ml_dtypes.bfloat16`` on the
host, viewed as uint16), as the bf16 GEMM takes its operands. A kernel calls
``load_float32(arr, index)`` and ``store_float32(arr, index, value)`` and does its
arithmetic in float32 whatever the array holds; numba compiles one specialisation per
argument dtype (a typing-time overload picks the conversion, so a float32 array costs
nothing extra). bf16 -> float32 is exact (a 16-bit shift); float32 -> bf16 rounds to
nearest even (``atoms.to_bf16``, one cvt). ``atoms.copy_element`` moves one element
between two arrays, converting only when their dtypes differ (a copy between arrays of
one dtype moves bits, and may move words of several elements: the head copies do). Those
loads and stores are atoms (``atoms.gpu``, twins in ``atoms.simulator``); this module is
what the memory-bound kernels build on them.

Groups: ``group_loader(width)`` and ``group_storer(width)`` move ``width`` consecutive
elements of a row (width 1 or GROUP = 4) between an array and a float32 register array,
as one vector access when width is GROUP: 16 bytes of float32 or 8 of bf16 per
instruction, where an element at a time kept too few bytes in flight to stream memory
(the memory-bound kernels' tuning log, docs/fused-kernels.md). A launcher picks the width
with ``group_width``: GROUP when the rows divide into groups and every array starts on a
group's boundary, else 1 (a plain access, the same kernel body).
"""
import numpy as np
from numba import cuda, uint32

from .atoms import (bits_to_float32, exp2_ftz, load_float32, load_group4, store_float32,
                    store_group4)
from .common import check_array, device_address
from .device import GROUP

BF16 = np.dtype(np.uint16)      # how a bf16 array is stored on the device


def is_bf16(arr):
    return arr.dtype == BF16


def check_activation(name, arr, shape, strided=False):
    """check_array for an array that may be float32 or bf16; returns whether it is bf16.
    strided: a view of some of a wider array's first columns passes too."""
    if arr.dtype not in (np.dtype(np.float32), BF16):
        raise TypeError(f"{name}: expected dtype float32 or bf16 (a uint16 array), "
                        f"got {arr.dtype}")
    check_array(name, arr, shape, arr.dtype, strided)
    if strided and arr.size and arr.strides[-1] != arr.dtype.itemsize:
        raise ValueError(f"{name}: a row's elements must be adjacent, got strides "
                         f"{tuple(arr.strides)}")
    return is_bf16(arr)


LOG2_E = np.float32(1.4426950408889634)


def group_width(row_length, *arrays):
    """GROUP if rows of row_length split into groups of GROUP elements and every array
    starts on a group's boundary (a vector access must be aligned to its size), else 1."""
    aligned = all(device_address(arr) % (GROUP * arr.dtype.itemsize) == 0 for arr in arrays)
    return GROUP if row_length % GROUP == 0 and aligned else 1


@cuda.jit(device=True, inline=True)
def unpack_bf16x2(pair):
    """The two float32 values of a bf16 pair (``atoms.pack_bf16x2``'s inverse: exact)."""
    return (bits_to_float32(uint32(pair) << uint32(16)),
            bits_to_float32(uint32(pair) & uint32(0xFFFF0000)))


@cuda.jit(device=True, inline=True)
def exp_approx(x):
    """e**x for the float32 x, by the special-function unit: ex2.approx.ftz of x log2(e),
    two instructions where libdevice's expf takes about ten. Relative error at most
    2 ulp plus |x| 2**-24 (the product's rounding); a result below 2**-126 is 0."""
    return exp2_ftz(x * LOG2_E)


@cuda.jit(device=True, inline=True)
def load_group1(out, at, arr, index):
    out[at] = load_float32(arr, index)


@cuda.jit(device=True, inline=True)
def store_group1(arr, index, values, at):
    store_float32(arr, index, values[at])


def group_loader(width):
    """A device function (out, at, arr, index): out[at:at + width] = the width elements of
    arr from index on (along its last axis), as float32; width 1 or GROUP (then index is a
    multiple of GROUP, and arr aligned: ``group_width``)."""
    return load_group4 if width == GROUP else load_group1


def group_storer(width):
    """A device function (arr, index, values, at): the width elements of arr from index on
    = values[at:at + width], rounded if arr is bf16; width as in group_loader."""
    return store_group4 if width == GROUP else store_group1
