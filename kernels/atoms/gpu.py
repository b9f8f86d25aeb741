"""The atoms on the GPU: single PTX instructions as numba intrinsics (the map of them, and
their fragment layouts: ``atoms``' docstring).

Each atom is one instruction emitted through an llvmlite inline-asm intrinsic
(``numba.cuda.extending.intrinsic``): it is inlined, costs no call, and keeps its operands
in registers. The loads and stores of activations in float32 or bf16 are typing-time
overloads, one specialisation per array dtype. The simulator runs the twins of
``atoms.simulator`` instead, which define the same names.
"""
import functools

from llvmlite import ir
from numba import cuda, uint32
from numba.cuda import cgutils, types
from numba.cuda.extending import intrinsic, overload

from ..device import GROUP
from . import ATOMS

__all__ = ATOMS     # the package's list (tests/test_kernels_mma.py: each one defined)

_i16, _i32, _i64, _f32 = ir.IntType(16), ir.IntType(32), ir.IntType(64), ir.FloatType()


def _asm(builder, ret, args, text, constraints, side_effect=True):
    fn = ir.FunctionType(ret, [a.type for a in args])
    return builder.call(ir.InlineAsm(fn, text, constraints, side_effect=side_effect),
                        args)


def _element_address(context, builder, aryty, ary, index, addrspace, width):
    """The address of element `index` of a C-contiguous array's flat data, in the given
    state space (3 shared, 1 global) as a `width`-bit integer."""
    data = context.make_array(aryty)(context, builder, ary).data
    ptr = builder.gep(data, [builder.sext(index, _i64) if index.type.width < 64
                             else index])
    ptr = builder.addrspacecast(ptr, ir.PointerType(ptr.type.pointee, addrspace))
    return builder.ptrtoint(ptr, ir.IntType(width))


def _unpack(context, builder, rettype, struct, n):
    return context.make_tuple(builder, rettype,
                              [builder.extract_value(struct, i) for i in range(n)])


@intrinsic
def mma_bf16_16816(typingctx, a0, a1, a2, a3, b0, b1, c0, c1, c2, c3):
    u32, f32 = types.uint32, types.float32
    sig = types.UniTuple(f32, 4)(u32, u32, u32, u32, u32, u32, f32, f32, f32, f32)

    def codegen(context, builder, sig, args):
        out = _asm(builder, ir.LiteralStructType([_f32] * 4), list(args),
                   "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                   "{$0,$1,$2,$3}, {$4,$5,$6,$7}, {$8,$9}, {$10,$11,$12,$13};",
                   "=f,=f,=f,=f,r,r,r,r,r,r,f,f,f,f", side_effect=False)
        return _unpack(context, builder, sig.return_type, out, 4)
    return sig, codegen


def _ldmatrix(trans):
    text = (f"ldmatrix.sync.aligned.m8n8.x4{'.trans' if trans else ''}.shared.b16 "
            "{$0,$1,$2,$3}, [$4];")

    @intrinsic
    def ldmatrix(typingctx, smem, index):
        sig = types.UniTuple(types.uint32, 4)(smem, types.int32)

        def codegen(context, builder, sig, args):
            addr = _element_address(context, builder, sig.args[0], args[0], args[1], 3, 32)
            out = _asm(builder, ir.LiteralStructType([_i32] * 4), [addr], text,
                       "=r,=r,=r,=r,r,~{memory}")
            return _unpack(context, builder, sig.return_type, out, 4)
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
            shared = _element_address(context, builder, sig.args[0], args[0], args[1],
                                      3, 32)
            glob = _element_address(context, builder, sig.args[2], args[2], args[3],
                                    1, 64)
            _asm(builder, ir.VoidType(), [shared, glob, args[4]], text, "r,l,r,~{memory}")
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
            return _asm(builder, _f32, list(args), f"{instruction} $0, $1;", "=f,f",
                        side_effect=False)
        return sig, codegen
    return op

exp2_ftz = _float32_op("ex2.approx.ftz.f32")
rcp_approx = _float32_op("rcp.approx.ftz.f32")


@intrinsic
def cp_async_commit(typingctx):
    def codegen(context, builder, sig, args):
        _asm(builder, ir.VoidType(), [], "cp.async.commit_group;", "~{memory}")
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
            _asm(builder, ir.VoidType(), [], f"cp.async.wait_group {n};", "~{memory}")
            return context.get_dummy_value()
        return types.void(), codegen
    return cp_async_wait

_wait_groups = [_wait_group(n) for n in range(8)]


@intrinsic
def pack_bf16x2(typingctx, lo, hi):
    sig = types.uint32(types.float32, types.float32)

    def codegen(context, builder, sig, args):
        # cvt packs its first source into the high half
        return _asm(builder, _i32, [args[1], args[0]], "cvt.rn.bf16x2.f32 $0, $1, $2;",
                    "=r,f,f", side_effect=False)
    return sig, codegen


@intrinsic
def to_bf16(typingctx, x):
    sig = types.uint16(types.float32)

    def codegen(context, builder, sig, args):
        return _asm(builder, _i16, list(args), "cvt.rn.bf16.f32 $0, $1;", "=h,f",
                    side_effect=False)
    return sig, codegen


@intrinsic
def bits_to_float32(typingctx, bits):
    sig = types.float32(types.uint32)

    def codegen(context, builder, sig, args):
        return builder.bitcast(args[0], _f32)
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
        return _asm(builder, _i32, list(args), "mov.b32 $0, $1;", "=r,r")
    return sig, codegen


@intrinsic
def words_to_b64(typingctx, low, high):
    # The two 32-bit words of a 64-bit operand (a wgmma descriptor), joined where ptxas
    # sees them apart: numba adds in 64 bits and LLVM, which can prove a start address
    # plus an offset never carries, drops the mask that would say so, so ptxas adds and
    # carries in pairs (and moves both words to uniform registers) for every wgmma.
    sig = types.uint64(types.uint32, types.uint32)

    def codegen(context, builder, sig, args):
        return _asm(builder, _i64, list(args), "mov.b64 $0, {$1, $2};", "=l,r,r",
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
        return _asm(builder, _i32, list(args), "shfl.sync.idx.b32 $0, $1, 0, 31, -1;",
                    "=r,r", side_effect=False)
    return sig, codegen


@intrinsic
def shared_address(typingctx, smem, index):
    sig = types.uint32(smem, types.int32)

    def codegen(context, builder, sig, args):
        return _element_address(context, builder, sig.args[0], args[0], args[1], 3, 32)
    return sig, codegen


def _elements(context, builder, aryty, ary, n):
    data = context.make_array(aryty)(context, builder, ary).data
    return [builder.gep(data, [ir.Constant(_i64, i)]) for i in range(n)]


def _tied(builder, context, aryty, ary, regs, text, ins=(), in_constraints=()):
    """The inline asm `text` with the `regs` floats of array `ary` as its operands $0..
    in and out (tied), and `ins` after them: the compiler keeps the floats in the same
    registers through it and orders every other use of them before or after it."""
    cells = _elements(context, builder, aryty, ary, regs)
    values = [builder.load(cell) for cell in cells]
    constraints = ",".join(["=f"] * regs + list(in_constraints)
                           + [str(i) for i in range(regs)] + ["~{memory}"])
    out = _asm(builder, ir.LiteralStructType([_f32] * regs), list(ins) + values, text,
               constraints)
    for i, cell in enumerate(cells):
        builder.store(builder.extract_value(out, i), cell)


@functools.cache
def wgmma_bf16(n, trans_a, trans_b):
    """The atom D(64 x n) += A . B for a warpgroup: wgmma(smem, desc_a, desc_b, acc),
    acc a float32 array of n/2 (smem is the twin's: the descriptors address it)."""
    regs = n // 2
    d = ",".join(f"${i}" for i in range(regs))
    text = (f"{{ .reg .pred p; setp.ne.b32 p, ${regs + 2}, 0; "
            f"wgmma.mma_async.sync.aligned.m64n{n}k16.f32.bf16.bf16 {{{d}}}, "
            f"${regs}, ${regs + 1}, p, 1, 1, {int(trans_a)}, {int(trans_b)}; }}")

    @intrinsic
    def wgmma(typingctx, smem, desc_a, desc_b, acc):
        sig = types.void(smem, types.uint64, types.uint64, acc)

        def codegen(context, builder, sig, args):
            one = ir.Constant(_i32, 1)       # scale-d: D = A.B + D
            _tied(builder, context, sig.args[3], args[3], regs, text,
                  (args[1], args[2], one), ("l", "l", "r"))
            return context.get_dummy_value()
        return sig, codegen
    return wgmma


@functools.cache
def wgmma_bf16_acc(n, trans_a, trans_b):
    """wgmma_bf16 whose scale-d is an operand: wgmma(smem, desc_a, desc_b, acc,
    accumulate), D = A . B + D where accumulate is nonzero, D = A . B (acc's values
    unread) where it is 0: the first of a chain overwrites the accumulators, which then
    need no zeros written first."""
    regs = n // 2
    d = ",".join(f"${i}" for i in range(regs))
    text = (f"{{ .reg .pred p; setp.ne.b32 p, ${regs + 2}, 0; "
            f"wgmma.mma_async.sync.aligned.m64n{n}k16.f32.bf16.bf16 {{{d}}}, "
            f"${regs}, ${regs + 1}, p, 1, 1, {int(trans_a)}, {int(trans_b)}; }}")

    @intrinsic
    def wgmma(typingctx, smem, desc_a, desc_b, acc, accumulate):
        sig = types.void(smem, types.uint64, types.uint64, acc, types.uint32)

        def codegen(context, builder, sig, args):
            _tied(builder, context, sig.args[3], args[3], regs, text,
                  (args[1], args[2], args[4]), ("l", "l", "r"))
            return context.get_dummy_value()
        return sig, codegen
    return wgmma


@functools.cache
def wgmma_bf16_rs(n, trans_b):
    """The atom D(64 x n) += A . B for a warpgroup with A from registers:
    wgmma_rs(smem, a0, a1, a2, a3, desc_b, acc), a0..a3 the bf16 pairs of the thread's
    A fragment (the mma.sync A layout, per warp its 16 rows), B from shared memory through
    its descriptor (smem is the twin's), acc a float32 array of n/2. Asynchronous as
    wgmma_bf16; ptxas keeps the A registers live until the wait."""
    regs = n // 2
    d = ",".join(f"${i}" for i in range(regs))
    a = ",".join(f"${regs + i}" for i in range(4))
    text = (f"{{ .reg .pred p; setp.ne.b32 p, ${regs + 5}, 0; "
            f"wgmma.mma_async.sync.aligned.m64n{n}k16.f32.bf16.bf16 {{{d}}}, "
            f"{{{a}}}, ${regs + 4}, p, 1, 1, {int(trans_b)}; }}")

    @intrinsic
    def wgmma_rs(typingctx, smem, a0, a1, a2, a3, desc_b, acc):
        u32 = types.uint32
        sig = types.void(smem, u32, u32, u32, u32, types.uint64, acc)

        def codegen(context, builder, sig, args):
            one = ir.Constant(_i32, 1)       # scale-d: D = A.B + D
            _tied(builder, context, sig.args[6], args[6], regs, text,
                  (*args[1:6], one), ("r", "r", "r", "r", "l", "r"))
            return context.get_dummy_value()
        return sig, codegen
    return wgmma_rs


def _through_accumulators(text, regs):
    """An atom f(acc) that runs the inline asm `text` with acc's `regs` floats tied
    through it (_tied): no read or write of them moves across it."""
    @intrinsic
    def atom(typingctx, acc):
        def codegen(context, builder, sig, args):
            _tied(builder, context, sig.args[0], args[0], regs, text)
            return context.get_dummy_value()
        return types.void(acc), codegen
    return atom


@functools.cache
def warpgroup_fence(regs):
    """wgmma.fence: the accumulator array's registers, as written before it, are what
    the wgmma after it reads (needed before the first one and after other writes)."""
    return _through_accumulators("wgmma.fence.sync.aligned;", regs)


def _ordered_asm(text):
    """An atom f() that runs the inline asm `text` with a memory clobber: no load or
    store moves across it."""
    @intrinsic
    def atom(typingctx):
        def codegen(context, builder, sig, args):
            _asm(builder, ir.VoidType(), [], text, "~{memory}")
            return context.get_dummy_value()
        return types.void(), codegen
    return atom

warpgroup_commit = _ordered_asm("wgmma.commit_group.sync.aligned;")


@functools.cache
def warpgroup_wait(n, regs):
    """wgmma.wait_group n: at most n committed groups still in flight; the accumulator
    array passes through it, so no read of it moves above the wait."""
    return _through_accumulators(f"wgmma.wait_group.sync.aligned {n};", regs)

@functools.cache
def set_max_registers(n, increase):
    """setmaxnreg: this warpgroup's registers a thread, from here on, raised (increase) or
    lowered to n (a multiple of 8, 24-256), so that a copying warpgroup hands its registers
    to the computing ones. Honoured in a whole-program compile only (the driver's JIT of the
    PTX: kernels.whole); numba's relocatable link ignores it."""
    return _ordered_asm(f"setmaxnreg.{'inc' if increase else 'dec'}.sync.aligned.u32 {n};")

fence_proxy_async = _ordered_asm("fence.proxy.async.shared::cta;")
fence_proxy_async_global = _ordered_asm("fence.proxy.async.global;")

# mbarriers and the bulk tensor copy (sm_90) ----------------------------------------


def _shared(context, builder, sig, args, i):
    """The 32-bit shared-memory address of element args[i + 1] of array args[i]."""
    return _element_address(context, builder, sig.args[i], args[i], args[i + 1], 3, 32)


def _barrier_atom(text):
    """An atom f(bars, index, n) running `text` on the mbarrier bars[index] ($0) with
    the 32-bit operand n ($1)."""
    @intrinsic
    def atom(typingctx, bars, index, n):
        sig = types.void(bars, types.int32, types.uint32)

        def codegen(context, builder, sig, args):
            _asm(builder, ir.VoidType(), [_shared(context, builder, sig, args, 0), args[2]],
                 text, "r,r,~{memory}")
            return context.get_dummy_value()
        return sig, codegen
    return atom

mbarrier_init = _barrier_atom("mbarrier.init.shared::cta.b64 [$0], $1;")
# n arrivals; and one arrival announcing n bytes that copies will complete on it
mbarrier_arrive = _barrier_atom(
    "{ .reg .b64 state; mbarrier.arrive.release.cta.shared::cta.b64 state, [$0], $1; }")
mbarrier_arrive_expect_tx = _barrier_atom(
    "{ .reg .b64 state; mbarrier.arrive.expect_tx.release.cta.shared::cta.b64 state, "
    "[$0], $1; }")


@intrinsic
def mbarrier_try_wait(typingctx, bars, index, parity):
    sig = types.boolean(bars, types.int32, types.uint32)

    def codegen(context, builder, sig, args):
        done = _asm(builder, _i32, [_shared(context, builder, sig, args, 0), args[2]],
                    "{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [$1], $2; "
                    "selp.u32 $0, 1, 0, p; }", "=r,r,r,~{memory}")
        return builder.icmp_unsigned("!=", done, ir.Constant(_i32, 0))
    return sig, codegen

fence_barrier_init = _ordered_asm("fence.mbarrier_init.release.cluster;")


@intrinsic
def tma_load_2d(typingctx, smem, index, src, tensor_map, col, row, bars, bar):
    # src is the twin's (the tensor map addresses it); the map is read through its
    # generic address, from global memory
    sig = types.void(smem, types.int32, src, tensor_map, types.int32, types.int32,
                     bars, types.int32)

    def codegen(context, builder, sig, args):
        data = context.make_array(sig.args[3])(context, builder, args[3]).data
        _asm(builder, ir.VoidType(),
             [_shared(context, builder, sig, args, 0), builder.ptrtoint(data, _i64),
              args[4], args[5], _shared(context, builder, sig, args, 6)],
             "cp.async.bulk.tensor.2d.shared::cluster.global.tile"
             ".mbarrier::complete_tx::bytes [$0], [$1, {$2, $3}], [$4];",
             "r,l,r,r,r,~{memory}")
        return context.get_dummy_value()
    return sig, codegen


def _tma_store(text):
    @intrinsic
    def atom(typingctx, dst, tensor_map, col, row, smem, index):
        # dst is the twin's, as src is tma_load_2d's
        sig = types.void(dst, tensor_map, types.int32, types.int32, smem, types.int32)

        def codegen(context, builder, sig, args):
            data = context.make_array(sig.args[1])(context, builder, args[1]).data
            _asm(builder, ir.VoidType(),
                 [builder.ptrtoint(data, _i64), args[2], args[3],
                  _shared(context, builder, sig, args, 4)],
                 text + " [$0, {$1, $2}], [$3];", "l,r,r,r,~{memory}")
            return context.get_dummy_value()
        return sig, codegen
    return atom

# a box of shared memory written (or added, float32) into dst's box at (col, row),
# in a bulk group: committed by bulk_commit, its shared memory free after bulk_wait
tma_store_2d = _tma_store("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group")
tma_add_2d = _tma_store(
    "cp.reduce.async.bulk.tensor.2d.global.shared::cta.add.tile.bulk_group")
bulk_commit = _ordered_asm("cp.async.bulk.commit_group;")
bulk_wait = _ordered_asm("cp.async.bulk.wait_group.read 0;")
bulk_wait_but_one = _ordered_asm("cp.async.bulk.wait_group.read 1;")
bulk_wait_written = _ordered_asm("cp.async.bulk.wait_group 0;")

# thread block clusters (sm_90) ------------------------------------------------------


def _special_register(name):
    @intrinsic
    def atom(typingctx):
        sig = types.int32()

        def codegen(context, builder, sig, args):
            return _asm(builder, _i32, [], f"mov.u32 $0, {name};", "=r", side_effect=False)
        return sig, codegen
    return atom

cluster_rank = _special_register("%cluster_ctarank")
cluster_index = _special_register("%clusterid.x")
cluster_count = _special_register("%nclusterid.x")
cluster_sync = _ordered_asm("barrier.cluster.arrive.release.aligned; "
                            "barrier.cluster.wait.acquire.aligned;")
mbarrier_arrive_cluster = _barrier_atom(
    "{ .reg .b32 remote; mapa.shared::cluster.u32 remote, $0, $1; "
    "mbarrier.arrive.release.cluster.shared::cluster.b64 _, [remote]; }")


@intrinsic
def tma_load_2d_multicast(typingctx, smem, index, src, tensor_map, col, row, bars, bar, mask):
    sig = types.void(smem, types.int32, src, tensor_map, types.int32, types.int32,
                     bars, types.int32, types.uint16)

    def codegen(context, builder, sig, args):
        data = context.make_array(sig.args[3])(context, builder, args[3]).data
        _asm(builder, ir.VoidType(),
             [_shared(context, builder, sig, args, 0), builder.ptrtoint(data, _i64),
              args[4], args[5], _shared(context, builder, sig, args, 6), args[8]],
             "cp.async.bulk.tensor.2d.shared::cluster.global.tile"
             ".mbarrier::complete_tx::bytes.multicast::cluster [$0], [$1, {$2, $3}], [$4], $5;",
             "r,l,r,r,r,h,~{memory}")
        return context.get_dummy_value()
    return sig, codegen


@intrinsic
def named_barrier(typingctx, barrier, threads):
    # bar.sync among `threads` threads (whole warps): the block's barrier 0 is
    # syncthreads', a warp-specialized kernel's others wait for some warps only
    sig = types.void(types.int32, types.int32)

    def codegen(context, builder, sig, args):
        _asm(builder, ir.VoidType(), list(args), "bar.sync $0, $1;", "r,r,~{memory}")
        return context.get_dummy_value()
    return sig, codegen


@intrinsic
def named_barrier_arrive(typingctx, barrier, threads):
    # bar.arrive: this thread's arrival at a named barrier of `threads`, without waiting
    # for it (the others' bar.sync wait): one warpgroup signals another's turn
    sig = types.void(types.int32, types.int32)

    def codegen(context, builder, sig, args):
        _asm(builder, ir.VoidType(), list(args), "bar.arrive $0, $1;", "r,r,~{memory}")
        return context.get_dummy_value()
    return sig, codegen


@intrinsic
def fence_tensor_map(typingctx, tensor_map):
    def codegen(context, builder, sig, args):
        data = context.make_array(sig.args[0])(context, builder, args[0]).data
        _asm(builder, ir.VoidType(), [builder.ptrtoint(data, _i64)],
             "fence.proxy.tensormap::generic.acquire.gpu [$0], 128;", "l,~{memory}")
        return context.get_dummy_value()
    return types.void(tensor_map), codegen


# ----------------------------------------------------------------------------------
# activations in float32 or bf16 (precision)


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
        builder.store(args[2], builder.bitcast(ptr, _i32.as_pointer()), align=4)
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

