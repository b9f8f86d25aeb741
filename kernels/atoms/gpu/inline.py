"""The plumbing every atom on the GPU is emitted through: an llvmlite inline-asm call, an
element's address in a state space, a struct of results unpacked into a tuple."""
from llvmlite import ir

I16, I32, I64, F32 = ir.IntType(16), ir.IntType(32), ir.IntType(64), ir.FloatType()


def asm(builder, ret, args, text, constraints, side_effect=True):
    fn = ir.FunctionType(ret, [a.type for a in args])
    return builder.call(ir.InlineAsm(fn, text, constraints, side_effect=side_effect),
                        args)


def element_address(context, builder, aryty, ary, index, addrspace, width):
    """The address of element `index` of a C-contiguous array's flat data, in the given
    state space (3 shared, 1 global) as a `width`-bit integer."""
    data = context.make_array(aryty)(context, builder, ary).data
    ptr = builder.gep(data, [builder.sext(index, I64) if index.type.width < 64
                             else index])
    ptr = builder.addrspacecast(ptr, ir.PointerType(ptr.type.pointee, addrspace))
    return builder.ptrtoint(ptr, ir.IntType(width))


def unpack(context, builder, rettype, struct, n):
    return context.make_tuple(builder, rettype,
                              [builder.extract_value(struct, i) for i in range(n)])
