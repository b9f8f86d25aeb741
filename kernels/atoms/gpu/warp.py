"""The atoms of one thread or one warp (sm_80 and later): mma.sync, ldmatrix, cp.async, the
special-function unit's float32 operations, the bf16 conversions, the shuffles, and the hints
that steer LLVM and ptxas (opaque, words_to_b64, warp_uniform)."""
from llvmlite import ir
from numba import cuda
from numba.cuda import types
from numba.cuda.extending import intrinsic

from .inline import F32, I16, I32, I64, asm, element_address, unpack

__all__ = (
    "mma_bf16_16816", "ldmatrix_x4", "ldmatrix_x4_trans", "cp_async_16", "cp_async_4",
    "exp2_ftz", "rcp_approx", "cp_async_commit", "cp_async_wait_group", "pack_bf16x2",
    "to_bf16", "bits_to_float32", "shuffle_xor", "opaque", "words_to_b64", "warp_uniform",
    "shared_address",
)


@intrinsic
def mma_bf16_16816(typingctx, a0, a1, a2, a3, b0, b1, c0, c1, c2, c3):
    u32, f32 = types.uint32, types.float32
    sig = types.UniTuple(f32, 4)(u32, u32, u32, u32, u32, u32, f32, f32, f32, f32)

    def codegen(context, builder, sig, args):
        out = asm(builder, ir.LiteralStructType([F32] * 4), list(args),
                   "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                   "{$0,$1,$2,$3}, {$4,$5,$6,$7}, {$8,$9}, {$10,$11,$12,$13};",
                   "=f,=f,=f,=f,r,r,r,r,r,r,f,f,f,f", side_effect=False)
        return unpack(context, builder, sig.return_type, out, 4)
    return sig, codegen


def _ldmatrix(trans):
    text = (f"ldmatrix.sync.aligned.m8n8.x4{'.trans' if trans else ''}.shared.b16 "
            "{$0,$1,$2,$3}, [$4];")

    @intrinsic
    def ldmatrix(typingctx, smem, index):
        sig = types.UniTuple(types.uint32, 4)(smem, types.int32)

        def codegen(context, builder, sig, args):
            addr = element_address(context, builder, sig.args[0], args[0], args[1], 3, 32)
            out = asm(builder, ir.LiteralStructType([I32] * 4), [addr], text,
                       "=r,=r,=r,=r,r,~{memory}")
            return unpack(context, builder, sig.return_type, out, 4)
        return sig, codegen
    return ldmatrix

ldmatrix_x4 = _ldmatrix(False)
ldmatrix_x4_trans = _ldmatrix(True)


def _cp_async(size, cache):
    """The atom copying `size` bytes global -> shared, through L1 (ca) or not (cg,
    16 bytes only)."""
    text = f"cp.async.{cache}.shared.global [$0], [$1], {size}, $2;"

    @intrinsic
    def cp_async(typingctx, dst, dst_index, src, src_index, src_bytes):
        sig = types.void(dst, types.int32, src, types.int64, types.uint32)

        def codegen(context, builder, sig, args):
            shared = element_address(context, builder, sig.args[0], args[0], args[1],
                                      3, 32)
            glob = element_address(context, builder, sig.args[2], args[2], args[3],
                                    1, 64)
            asm(builder, ir.VoidType(), [shared, glob, args[4]], text, "r,l,r,~{memory}")
            return context.get_dummy_value()
        return sig, codegen
    return cp_async

cp_async_16 = _cp_async(16, "cg")
cp_async_4 = _cp_async(4, "ca")


def _float32_op(instruction):
    """A float32 -> float32 instruction of the special-function unit."""
    @intrinsic
    def op(typingctx, x):
        sig = types.float32(types.float32)

        def codegen(context, builder, sig, args):
            return asm(builder, F32, list(args), f"{instruction} $0, $1;", "=f,f",
                        side_effect=False)
        return sig, codegen
    return op

exp2_ftz = _float32_op("ex2.approx.ftz.f32")
rcp_approx = _float32_op("rcp.approx.ftz.f32")


@intrinsic
def cp_async_commit(typingctx):
    def codegen(context, builder, sig, args):
        asm(builder, ir.VoidType(), [], "cp.async.commit_group;", "~{memory}")
        return context.get_dummy_value()
    return types.void(), codegen


def cp_async_wait_group(n):
    """The atom that waits until at most n committed groups are still in flight (n is
    an immediate of the instruction, so each n is its own intrinsic)."""
    return _wait_groups[n]


def _wait_group(n):
    @intrinsic
    def cp_async_wait(typingctx):
        def codegen(context, builder, sig, args):
            asm(builder, ir.VoidType(), [], f"cp.async.wait_group {n};", "~{memory}")
            return context.get_dummy_value()
        return types.void(), codegen
    return cp_async_wait

_wait_groups = [_wait_group(n) for n in range(8)]


@intrinsic
def pack_bf16x2(typingctx, lo, hi):
    sig = types.uint32(types.float32, types.float32)

    def codegen(context, builder, sig, args):
        # cvt packs its first source into the high half
        return asm(builder, I32, [args[1], args[0]], "cvt.rn.bf16x2.f32 $0, $1, $2;",
                    "=r,f,f", side_effect=False)
    return sig, codegen


@intrinsic
def to_bf16(typingctx, x):
    sig = types.uint16(types.float32)

    def codegen(context, builder, sig, args):
        return asm(builder, I16, list(args), "cvt.rn.bf16.f32 $0, $1;", "=h,f",
                    side_effect=False)
    return sig, codegen


@intrinsic
def bits_to_float32(typingctx, bits):
    sig = types.float32(types.uint32)

    def codegen(context, builder, sig, args):
        return builder.bitcast(args[0], F32)
    return sig, codegen


@cuda.jit(device=True, inline=True)
def shuffle_xor(value, lane_mask):
    return cuda.shfl_xor_sync(0xFFFFFFFF, value, lane_mask)


@intrinsic
def opaque(typingctx, x):
    # A value that depends on the lane alone is loop-invariant: LLVM hoists every
    # expression of it (the shared-memory index of each fragment of a step) out of
    # the loop and holds them all in registers, two per 64-bit index. Passed through
    # this atom inside the loop it is recomputed there, a few integer operations each,
    # in 32 bits: numba widens int32 arithmetic to int64, and LLVM narrows it back
    # where the result is truncated and every leaf is a constant or a widened int32.
    sig = types.int32(types.int32)

    def codegen(context, builder, sig, args):
        return asm(builder, I32, list(args), "mov.b32 $0, $1;", "=r,r")
    return sig, codegen


@intrinsic
def words_to_b64(typingctx, low, high):
    # The two 32-bit words of a 64-bit operand (a wgmma descriptor), joined where ptxas
    # sees them apart: numba adds in 64 bits and LLVM, which can prove a start address
    # plus an offset never carries, drops the mask that would say so, so ptxas adds and
    # carries in pairs (and moves both words to uniform registers) for every wgmma.
    sig = types.uint64(types.uint32, types.uint32)

    def codegen(context, builder, sig, args):
        return asm(builder, I64, list(args), "mov.b64 $0, {$1, $2};", "=l,r,r",
                    side_effect=False)
    return sig, codegen


@intrinsic
def warp_uniform(typingctx, x):
    # An int32 the same in every lane of the warp (the warpgroup of a thread), as lane 0
    # holds it (shfl.sync.idx): ptxas then knows it is uniform, and what is computed
    # from it (the descriptors of a warpgroup's tiles) goes to the uniform datapath
    # instead of being moved there (R2UR) before each wgmma.
    sig = types.int32(types.int32)

    def codegen(context, builder, sig, args):
        return asm(builder, I32, list(args), "shfl.sync.idx.b32 $0, $1, 0, 31, -1;",
                    "=r,r", side_effect=False)
    return sig, codegen


@intrinsic
def shared_address(typingctx, smem, index):
    sig = types.uint32(smem, types.int32)

    def codegen(context, builder, sig, args):
        return element_address(context, builder, sig.args[0], args[0], args[1], 3, 32)
    return sig, codegen
