"""Activations held in float32 or in bf16: one kernel body reads and writes either.

bf16 arrays are uint16 device arrays of the bit patterns (``ml_dtypes.bfloat16`` on the
host, viewed as uint16), as the bf16 GEMM takes its operands. A kernel calls
``load_float32(arr, index)`` and ``store_float32(arr, index, value)`` and does its
arithmetic in float32 whatever the array holds; numba compiles one specialisation per
argument dtype (a typing-time overload picks the conversion, so a float32 array costs
nothing extra). bf16 -> float32 is exact (a 16-bit shift); float32 -> bf16 rounds to
nearest even (``mma.to_bf16``, one cvt). ``copy_element`` moves one element between
two arrays, converting only when their dtypes differ (a copy between arrays of one dtype
moves bits, and may move words of several elements: the head copies do).

Simulator twins: the simulator runs Python and knows no overloads, so there both helpers
are Python functions that look at the array's dtype when called.
"""
import numpy as np
from numba import cuda, uint32

from microgpt.kernels.common import SIMULATOR, check_array
from microgpt.kernels.mma import bits_to_float32, to_bf16

BF16 = np.dtype(np.uint16)      # how a bf16 array is stored on the device


def is_bf16(arr):
    return arr.dtype == BF16


def check_activation(name, arr, shape):
    """check_array for an array that may be float32 or bf16; returns whether it is bf16."""
    if arr.dtype not in (np.dtype(np.float32), BF16):
        raise TypeError(f"{name}: expected dtype float32 or bf16 (a uint16 array), "
                        f"got {arr.dtype}")
    check_array(name, arr, shape, arr.dtype)
    return is_bf16(arr)


LOG2_E = np.float32(1.4426950408889634)


if not SIMULATOR:
    from llvmlite import ir
    from numba.cuda import types
    from numba.cuda.extending import intrinsic, overload

    @intrinsic
    def _exp2_approx(typingctx, x):
        sig = types.float32(types.float32)

        def codegen(context, builder, sig, args):
            fn = ir.FunctionType(ir.FloatType(), [ir.FloatType()])
            return builder.call(ir.InlineAsm(fn, "ex2.approx.ftz.f32 $0, $1;", "=f,f",
                                             side_effect=False), list(args))
        return sig, codegen

    @cuda.jit(device=True, inline=True)
    def exp_approx(x):
        """e**x for the float32 x, by the special-function unit: ex2.approx.ftz of x log2(e),
        two instructions where libdevice's expf takes about ten. Relative error at most
        2 ulp plus |x| 2**-24 (the product's rounding); a result below 2**-126 is 0."""
        return _exp2_approx(x * LOG2_E)

    def load_float32(arr, index):
        """arr[index] as a float32 (arr float32 or bf16); device code only."""
        raise NotImplementedError("a device function: call it from a kernel")

    def store_float32(arr, index, value):
        """arr[index] = value, rounded to bf16 if arr is bf16; device code only."""
        raise NotImplementedError("a device function: call it from a kernel")

    @overload(load_float32)
    def _load_float32(arr, index):
        if arr.dtype == types.uint16:
            return lambda arr, index: bits_to_float32(uint32(arr[index]) << 16)
        return lambda arr, index: arr[index]

    def copy_element(dst, dst_index, src, src_index):
        """dst[dst_index] = src[src_index] through float32 (rounded if dst is bf16), or as
        the bits themselves when both arrays have one dtype; device code only."""
        raise NotImplementedError("a device function: call it from a kernel")

    @overload(copy_element)
    def _copy_element(dst, dst_index, src, src_index):
        if dst.dtype == src.dtype:
            def copy_bits(dst, dst_index, src, src_index):
                dst[dst_index] = src[src_index]
            return copy_bits

        def convert(dst, dst_index, src, src_index):
            store_float32(dst, dst_index, load_float32(src, src_index))
        return convert

    @overload(store_float32)
    def _store_float32(arr, index, value):
        if arr.dtype == types.uint16:
            def store_bf16(arr, index, value):
                arr[index] = to_bf16(value)
            return store_bf16

        def store(arr, index, value):
            arr[index] = value
        return store

else:
    @cuda.jit(device=True)
    def exp_approx(x):
        with np.errstate(over="ignore"):    # inf, as the device's ex2 gives
            return np.float32(np.exp2(np.float32(x) * LOG2_E))

    @cuda.jit(device=True)
    def load_float32(arr, index):
        if is_bf16(arr):
            return bits_to_float32(np.uint32(arr[index]) << np.uint32(16))
        return np.float32(arr[index])

    @cuda.jit(device=True)
    def store_float32(arr, index, value):
        arr[index] = to_bf16(value) if is_bf16(arr) else value

    @cuda.jit(device=True)
    def copy_element(dst, dst_index, src, src_index):
        if dst.dtype == src.dtype:
            dst[dst_index] = src[src_index]
        else:
            store_float32(dst, dst_index, load_float32(src, src_index))
