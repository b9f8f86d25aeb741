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

Groups: ``group_loader(width)`` and ``group_storer(width)`` move ``width`` consecutive
elements of a row (width 1 or GROUP = 4) between an array and a float32 register array,
as one vector access when width is GROUP: 16 bytes of float32 or 8 of bf16 per
instruction, where an element at a time kept too few bytes in flight to stream memory
(the memory-bound kernels' tuning log, docs/fused-kernels.md). A launcher picks the width
with ``group_width``: GROUP when the rows divide into groups and every array starts on a
group's boundary, else 1 (a plain access, the same kernel body).

Simulator twins: the simulator runs Python and knows no overloads, so there both helpers
are Python functions that look at the array's dtype when called.
"""
import numpy as np
from numba import cuda, uint32

from microgpt.kernels.common import SIMULATOR, check_array, device_address
from microgpt.kernels.mma import bits_to_float32, exp2_ftz, to_bf16

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
GROUP = 4       # elements of one vector access: 16 bytes of float32, 8 of bf16


def group_width(row_length, *arrays):
    """GROUP if rows of row_length split into groups of GROUP elements and every array
    starts on a group's boundary (a vector access must be aligned to its size), else 1."""
    aligned = all(device_address(arr) % (GROUP * arr.dtype.itemsize) == 0 for arr in arrays)
    return GROUP if row_length % GROUP == 0 and aligned else 1


@cuda.jit(device=True, inline=True)
def unpack_bf16x2(pair):
    """The two float32 values of a bf16 pair (``mma.pack_bf16x2``'s inverse: exact)."""
    return (bits_to_float32(uint32(pair) << uint32(16)),
            bits_to_float32(uint32(pair) & uint32(0xFFFF0000)))


@cuda.jit(device=True, inline=True)
def exp_approx(x):
    """e**x for the float32 x, by the special-function unit: ex2.approx.ftz of x log2(e),
    two instructions where libdevice's expf takes about ten. Relative error at most
    2 ulp plus |x| 2**-24 (the product's rounding); a result below 2**-126 is 0."""
    return exp2_ftz(x * LOG2_E)


if not SIMULATOR:
    from llvmlite import ir
    from numba.cuda import cgutils, types
    from numba.cuda.extending import intrinsic, overload

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

    def _vector_pointer(context, builder, aryty, ary, indexty, index):
        """The element's address as a pointer to a vector of GROUP elements."""
        if isinstance(indexty, types.BaseTuple):
            indices = cgutils.unpack_tuple(builder, index, len(indexty))
            indextys = indexty.types
        else:
            indices, indextys = [index], [indexty]
        indices = [context.cast(builder, i, t, types.intp) for i, t in zip(indices, indextys)]
        array = context.make_array(aryty)(context, builder, ary)
        ptr = cgutils.get_item_pointer(context, builder, aryty, array, indices)
        return builder.bitcast(ptr, ir.VectorType(ptr.type.pointee, GROUP).as_pointer())

    @intrinsic
    def _load_vector(typingctx, arr, index):
        """arr[index], ... arr[index + GROUP - 1] (along the last axis) by one aligned load."""
        sig = types.UniTuple(arr.dtype, GROUP)(arr, index)

        def codegen(context, builder, sig, args):
            ptr = _vector_pointer(context, builder, sig.args[0], args[0], sig.args[1], args[1])
            vector = builder.load(ptr, align=GROUP * sig.args[0].dtype.bitwidth // 8)
            return context.make_tuple(builder, sig.return_type, [
                builder.extract_element(vector, ir.Constant(ir.IntType(32), i))
                for i in range(GROUP)])
        return sig, codegen

    @intrinsic
    def _store_vector(typingctx, arr, index, values):
        """The GROUP values into arr[index], ... by one aligned store."""
        sig = types.void(arr, index, values)

        def codegen(context, builder, sig, args):
            ptr = _vector_pointer(context, builder, sig.args[0], args[0], sig.args[1], args[1])
            vector = ir.Constant(ptr.type.pointee, ir.Undefined)
            for i, value in enumerate(cgutils.unpack_tuple(builder, args[2], GROUP)):
                vector = builder.insert_element(vector, value, ir.Constant(ir.IntType(32), i))
            builder.store(vector, ptr, align=GROUP * sig.args[0].dtype.bitwidth // 8)
            return context.get_dummy_value()
        return sig, codegen

    def load_group4(out, at, arr, index):
        """out[at:at + GROUP] = arr's GROUP elements from index, as float32; device code
        only."""
        raise NotImplementedError("a device function: call it from a kernel")

    def store_group4(arr, index, values, at):
        """arr's GROUP elements from index = values[at:at + GROUP], rounded if bf16; device
        code only."""
        raise NotImplementedError("a device function: call it from a kernel")

    @overload(load_group4)
    def _load_group4(out, at, arr, index):
        if arr.dtype == types.uint16:
            def load_bf16(out, at, arr, index):
                v = _load_vector(arr, index)
                out[at] = bits_to_float32(uint32(v[0]) << 16)
                out[at + 1] = bits_to_float32(uint32(v[1]) << 16)
                out[at + 2] = bits_to_float32(uint32(v[2]) << 16)
                out[at + 3] = bits_to_float32(uint32(v[3]) << 16)
            return load_bf16

        def load(out, at, arr, index):
            v = _load_vector(arr, index)
            out[at] = v[0]
            out[at + 1] = v[1]
            out[at + 2] = v[2]
            out[at + 3] = v[3]
        return load

    @overload(store_group4)
    def _store_group4(arr, index, values, at):
        if arr.dtype == types.uint16:
            def store_bf16(arr, index, values, at):
                _store_vector(arr, index, (to_bf16(values[at]), to_bf16(values[at + 1]),
                                           to_bf16(values[at + 2]), to_bf16(values[at + 3])))
            return store_bf16

        def store(arr, index, values, at):
            _store_vector(arr, index, (values[at], values[at + 1], values[at + 2],
                                       values[at + 3]))
        return store

else:
    def _flat(arr, index):
        """The flat position of arr[index] in arr's data, checked to start a group: on
        the GPU a misaligned vector access faults, here it fails the test."""
        flat = int(np.ravel_multi_index(index, arr.shape)) if isinstance(index, tuple) \
            else int(index)
        if flat % GROUP or arr.ctypes.data % (GROUP * arr.itemsize):
            raise IndexError(f"a group access at element {flat} of an array at "
                             f"{arr.ctypes.data:#x} is not aligned to {GROUP} elements")
        return flat

    @cuda.jit(device=True)
    def load_group4(out, at, arr, index):
        flat = _flat(arr, index)
        for i in range(GROUP):
            out[at + i] = load_float32(arr.reshape(-1), flat + i)

    @cuda.jit(device=True)
    def store_group4(arr, index, values, at):
        flat = _flat(arr, index)
        for i in range(GROUP):
            store_float32(arr.reshape(-1), flat + i, values[at + i])

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
