"""The loads and stores of activations in float32 or bf16 (precision): typing-time overloads,
one specialisation per array dtype, and the vector loads and stores of GROUP elements."""
from llvmlite import ir
from numba import uint32
from numba.cuda import cgutils, types
from numba.cuda.extending import intrinsic, overload

from ...device import GROUP
from .inline import I32
from .warp import bits_to_float32, to_bf16

__all__ = (
    "load_float32", "store_float32", "copy_element", "load_words4", "store_words4",
    "store_pair", "load_group4", "store_group4",
)


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
def load_words4(typingctx, arr, index):
    """arr[index], ... arr[index + GROUP - 1] (along the last axis) as they are, a tuple,
    by one aligned load (the bits of bf16 pairs in a uint32 array read unconverted)."""
    sig = types.UniTuple(arr.dtype, GROUP)(arr, index)

    def codegen(context, builder, sig, args):
        ptr = _vector_pointer(context, builder, sig.args[0], args[0], sig.args[1], args[1])
        vector = builder.load(ptr, align=GROUP * sig.args[0].dtype.bitwidth // 8)
        return context.make_tuple(builder, sig.return_type, [
            builder.extract_element(vector, ir.Constant(ir.IntType(32), i))
            for i in range(GROUP)])
    return sig, codegen


@intrinsic
def store_words4(typingctx, arr, index, values):
    """The GROUP values (a tuple of arr's dtype) into arr[index], ... as they are, by one
    aligned store."""
    sig = types.void(arr, index, values)

    def codegen(context, builder, sig, args):
        ptr = _vector_pointer(context, builder, sig.args[0], args[0], sig.args[1], args[1])
        vector = ir.Constant(ptr.type.pointee, ir.Undefined)
        for i, value in enumerate(cgutils.unpack_tuple(builder, args[2], GROUP)):
            vector = builder.insert_element(vector, value, ir.Constant(ir.IntType(32), i))
        builder.store(vector, ptr, align=GROUP * sig.args[0].dtype.bitwidth // 8)
        return context.get_dummy_value()
    return sig, codegen


@intrinsic
def store_pair(typingctx, arr, index, word):
    """The bf16 pair `word` (its low half first) into arr[index] and the element after it
    along the last axis (contiguous), by one 4-byte store: arr[index] 4-byte aligned."""
    sig = types.void(arr, index, types.uint32)

    def codegen(context, builder, sig, args):
        aryty, indexty = sig.args[0], sig.args[1]
        indices = cgutils.unpack_tuple(builder, args[1], len(indexty))
        indices = [context.cast(builder, i, t, types.intp)
                   for i, t in zip(indices, indexty.types)]
        array = context.make_array(aryty)(context, builder, args[0])
        ptr = cgutils.get_item_pointer(context, builder, aryty, array, indices)
        builder.store(args[2], builder.bitcast(ptr, I32.as_pointer()), align=4)
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
            v = load_words4(arr, index)
            out[at] = bits_to_float32(uint32(v[0]) << 16)
            out[at + 1] = bits_to_float32(uint32(v[1]) << 16)
            out[at + 2] = bits_to_float32(uint32(v[2]) << 16)
            out[at + 3] = bits_to_float32(uint32(v[3]) << 16)
        return load_bf16

    def load(out, at, arr, index):
        v = load_words4(arr, index)
        out[at] = v[0]
        out[at + 1] = v[1]
        out[at + 2] = v[2]
        out[at + 3] = v[3]
    return load


@overload(store_group4)
def _store_group4(arr, index, values, at):
    if arr.dtype == types.uint16:
        def store_bf16(arr, index, values, at):
            store_words4(arr, index, (to_bf16(values[at]), to_bf16(values[at + 1]),
                                       to_bf16(values[at + 2]), to_bf16(values[at + 3])))
        return store_bf16

    def store(arr, index, values, at):
        store_words4(arr, index, (values[at], values[at + 1], values[at + 2],
                                   values[at + 3]))
    return store
