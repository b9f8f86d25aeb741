"""The Hopper (sm_90) atoms: wgmma and its fences, setmaxnreg, the proxy fences, mbarriers, the
bulk tensor copies (TMA) and their groups, thread block clusters, named barriers."""
import functools

from llvmlite import ir
from numba.cuda import types
from numba.cuda.extending import intrinsic

from .inline import F32, I32, I64, asm, element_address

__all__ = (
    "wgmma_bf16", "wgmma_bf16_acc", "wgmma_bf16_rs", "warpgroup_fence", "warpgroup_commit",
    "warpgroup_wait", "set_max_registers", "fence_proxy_async", "fence_proxy_async_global",
    "mbarrier_init", "mbarrier_arrive", "mbarrier_arrive_expect_tx", "mbarrier_try_wait",
    "fence_barrier_init", "tma_load_2d", "tma_store_2d", "tma_add_2d", "bulk_commit",
    "bulk_wait", "bulk_wait_but_one", "bulk_wait_written", "cluster_rank", "cluster_index",
    "cluster_count", "cluster_sync", "mbarrier_arrive_cluster", "tma_load_2d_multicast",
    "named_barrier", "named_barrier_arrive", "fence_tensor_map",
)


def _elements(context, builder, aryty, ary, n):
    data = context.make_array(aryty)(context, builder, ary).data
    return [builder.gep(data, [ir.Constant(I64, i)]) for i in range(n)]


def _tied(builder, context, aryty, ary, regs, text, ins=(), in_constraints=()):
    """The inline asm `text` with the `regs` floats of array `ary` as its operands $0..
    in and out (tied), and `ins` after them: the compiler keeps the floats in the same
    registers through it and orders every other use of them before or after it."""
    cells = _elements(context, builder, aryty, ary, regs)
    values = [builder.load(cell) for cell in cells]
    constraints = ",".join(["=f"] * regs + list(in_constraints)
                           + [str(i) for i in range(regs)] + ["~{memory}"])
    out = asm(builder, ir.LiteralStructType([F32] * regs), list(ins) + values, text,
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
            one = ir.Constant(I32, 1)       # scale-d: D = A.B + D
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
            one = ir.Constant(I32, 1)       # scale-d: D = A.B + D
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
            asm(builder, ir.VoidType(), [], text, "~{memory}")
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
    return element_address(context, builder, sig.args[i], args[i], args[i + 1], 3, 32)


def _barrier_atom(text):
    """An atom f(bars, index, n) running `text` on the mbarrier bars[index] ($0) with
    the 32-bit operand n ($1)."""
    @intrinsic
    def atom(typingctx, bars, index, n):
        sig = types.void(bars, types.int32, types.uint32)

        def codegen(context, builder, sig, args):
            asm(builder, ir.VoidType(), [_shared(context, builder, sig, args, 0), args[2]],
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
        done = asm(builder, I32, [_shared(context, builder, sig, args, 0), args[2]],
                    "{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [$1], $2; "
                    "selp.u32 $0, 1, 0, p; }", "=r,r,r,~{memory}")
        return builder.icmp_unsigned("!=", done, ir.Constant(I32, 0))
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
        asm(builder, ir.VoidType(),
             [_shared(context, builder, sig, args, 0), builder.ptrtoint(data, I64),
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
            asm(builder, ir.VoidType(),
                 [builder.ptrtoint(data, I64), args[2], args[3],
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
            return asm(builder, I32, [], f"mov.u32 $0, {name};", "=r", side_effect=False)
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
        asm(builder, ir.VoidType(),
             [_shared(context, builder, sig, args, 0), builder.ptrtoint(data, I64),
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
        asm(builder, ir.VoidType(), list(args), "bar.sync $0, $1;", "r,r,~{memory}")
        return context.get_dummy_value()
    return sig, codegen


@intrinsic
def named_barrier_arrive(typingctx, barrier, threads):
    # bar.arrive: this thread's arrival at a named barrier of `threads`, without waiting
    # for it (the others' bar.sync wait): one warpgroup signals another's turn
    sig = types.void(types.int32, types.int32)

    def codegen(context, builder, sig, args):
        asm(builder, ir.VoidType(), list(args), "bar.arrive $0, $1;", "r,r,~{memory}")
        return context.get_dummy_value()
    return sig, codegen


@intrinsic
def fence_tensor_map(typingctx, tensor_map):
    def codegen(context, builder, sig, args):
        data = context.make_array(sig.args[0])(context, builder, args[0]).data
        asm(builder, ir.VoidType(), [builder.ptrtoint(data, I64)],
             "fence.proxy.tensormap::generic.acquire.gpu [$0], 128;", "l,~{memory}")
        return context.get_dummy_value()
    return types.void(tensor_map), codegen
