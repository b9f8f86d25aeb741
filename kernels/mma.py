"""Tensor-core building blocks: single PTX instructions as numba intrinsics.

numba has no tensor-core API. Each atom here is one instruction emitted through an
llvmlite inline-asm intrinsic (``numba.cuda.extending.intrinsic``): it is inlined, costs no
call, and keeps its operands in registers. bf16 values live in 16-bit unsigned integers
(one element) or 32-bit ones (a pair, lower index in the low half), as the instructions
and the uint16 device arrays hold them.

The atoms, in the words of the PTX ISA (warp-collective ones marked):
  mma_bf16_16816      D(16x8) = A(16x16) . B(16x8) + C, bf16 in, float32 accumulate (warp)
  ldmatrix_x4         four 8x8 b16 matrices from shared memory into mma fragments (warp)
  ldmatrix_x4_trans   the same, each matrix transposed on the way (warp)
  cp_async_16         16 bytes global -> shared without registers, zero-filled past
                      src_bytes (sm_80+); grouped by cp_async_commit and waited on with
                      cp_async_wait_group(n) (at most n groups left in flight). The
                      source is element src_index of memory counted from src's first
                      element, whatever src's strides (a row pitch is the caller's)
  cp_async_4          4 bytes the same way, zero-filled when src_bytes is 0 (cp.async.ca:
                      the 16-byte form needs 16-byte aligned sources, and a row of float32
                      statistics in flash attention starts at any multiple of 4)
  exp2_ftz            2^x by ex2.approx.ftz.f32 (relative error 2^-22), results below
                      2^-126 flushed to 0: math.exp2 is ex2.approx without .ftz, which
                      ptxas wraps in three more instructions to keep subnormal results
  rcp_approx          1/x by rcp.approx.ftz.f32 (relative error 2^-23): 1.0 / x is the
                      IEEE-rounded rcp.rn, which ptxas completes with a subroutine call
                      for its slow path, and a call in a wgmma kernel serializes its wgmmas
  pack_bf16x2         two float32 -> a bf16 pair, round to nearest even
  to_bf16             one float32 -> bf16, round to nearest even
  bits_to_float32     a bit pattern read as float32 (bf16 -> float32 is a 16-bit shift)
  shuffle_xor         the float32 that lane ^ lane_mask holds (warp; numba's shfl_xor_sync
                      on the GPU, here for its twin: the row reductions of flash attention)
  opaque              an int32 unchanged, through a volatile mov the compiler may neither
                      move nor see through: what a loop computes from it stays in the loop
  shared_address      the shared-memory byte address of an element (for descriptors)
  wgmma_bf16(n, ta, tb)  D(64xn) += A(64x16) . B(16xn), both from shared memory through
                      64-bit matrix descriptors, bf16 in, float32 accumulate (warpgroup:
                      4 warps, sm_90a); asynchronous: ordered by warpgroup_fence(regs),
                      grouped by warpgroup_commit and waited on with warpgroup_wait(n, regs)
  fence_proxy_async   shared-memory writes of this thread (cp.async, st.shared) made
                      visible to the asynchronous proxy that wgmma and the bulk copies use
  mbarrier_init, mbarrier_arrive, mbarrier_arrive_expect_tx, mbarrier_try_wait
                      a shared-memory barrier whose phase completes when its count of
                      arrivals has come and the bytes announced by expect_tx have landed;
                      try_wait(parity) says whether the phase of that parity is complete
                      (fence_barrier_init makes an initialisation visible to the copies)
  tma_load_2d         the bulk tensor copy (sm_90): a box of a 2-D matrix, described by a
                      tensor map (tiles.tensor_map), global -> shared, swizzled, zeros past
                      the matrix's edges, its bytes completing on an mbarrier; issued by
                      one thread (fence_tensor_map: the map, in global memory, read fresh)
  tma_store_2d, tma_add_2d   a box shared -> global, written or added (float32) into the
                      matrix, clipped at its edges; grouped by bulk_commit, its shared
                      memory free again after bulk_wait
  named_barrier(id, n)  bar.sync among n threads (whole warps), not the whole block

Fragment layouts of mma.m16n8k16 (lane = threadIdx.x % 32, g = lane // 4, t = lane % 4;
each register holds the pair at columns 2t, 2t+1 of its row, or rows 2t, 2t+1 for B):
  A (row-major 16x16): a0 rows g, cols 0-7 | a1 rows g+8, cols 0-7 | a2 g, 8-15 | a3 g+8, 8-15
  B (k x n = 16x8):   b0 k 0-7, col g | b1 k 8-15, col g
  C, D (16x8):        c0, c1 row g, cols 2t, 2t+1 | c2, c3 row g+8
ldmatrix_x4: lanes 8q..8q+7 give the row addresses of matrix q; every lane receives, for
each q, the pair (row g, cols 2t, 2t+1) of matrix q, or with .trans (rows 2t, 2t+1, col g).

wgmma.m64nNk16 (thread = threadIdx.x % 128, warp w = thread // 32, g and t of its lane): the
accumulators are a float32 array of N/2 per thread, d[4j + 2h + e] = D[16w + g + 8h,
8j + 2t + e] for j < N/8, h, e in (0, 1): the C layout of mma.sync, once per 8 columns.
A and B are read from shared memory as a matrix descriptor describes them (PTX ISA,
"Matrix Descriptor Format"): bits 0-13 the start address >> 4, 16-29 the leading byte
offset >> 4, 32-45 the stride byte offset >> 4, 62-63 the swizzle (1: 128 bytes, 2: 64,
3: 32). A swizzled operand is made of rows of S = 32, 64 or 128 bytes whose 16-byte chunks
are XOR-ed with bits 7 and up of their address (Swizzle<log2(S/16), 4, 3>: the address
bits 4.. flipped by bits 7..), in atoms of 8 rows. K-major (ta or tb 0): a row is one m
(or n) and holds k contiguously, 16 of k per instruction; the stride offset steps 8 rows.
MN-major (1): a row is one k and holds S/2 of m (or n); the stride offset steps 8 rows of
k, the leading offset the next S/2 of m (or n).

Simulator twins. numba's CUDA simulator runs Python, so under it (NUMBA_ENABLE_CUDASIM=1)
every atom is a Python function of the same signature. The warp-collective ones exchange
what each lane holds through a module-level table, one slot per thread, between two
barriers: the simulator runs a block's threads together and blocks one after another, so
the table is the block's. Like the instructions, they must be called by every thread of
the block together (warp-uniform control flow, which the kernels built on them keep);
cp.async copies at once, so commit and wait are no-ops there.
"""
import functools

import numpy as np
from numba import cuda

from microgpt.kernels.common import SIMULATOR, WARP, device_address

CHUNK = 8              # bf16 elements in one 16-byte cp.async / ldmatrix row
MMA_M, MMA_N, MMA_K = 16, 8, 16
# cp.async and ldmatrix move 16-byte rows: shared arrays they touch are declared with
# alignment=SHARED_ALIGN (the simulator refuses any alignment, and needs none)
SHARED_ALIGN = None if SIMULATOR else 16


def swizzle(chunks):
    """(rows_per_line, phases) of the XOR swizzle of rows of `chunks` 16-byte chunks (1, 2,
    4 or 8 and more: rows of 16 to 128 bytes and wider): chunk c of row r lies at chunk
    c ^ (r // rows_per_line % phases) of its row. rows_per_line rows share one 128-byte
    line of banks; the pattern is the hardware's 32-, 64- and 128-byte swizzle modes (what
    the bulk tensor copies write and wgmma reads), and ldmatrix's eight rows land in
    eight distinct bank groups. The one definition of it: tiles, the wgmma epilogue and
    the bulk copies' twins all take it from here."""
    return max(1, 8 // chunks), min(chunks, 8)

if not SIMULATOR:
    from llvmlite import ir
    from numba.cuda import types
    from numba.cuda.extending import intrinsic

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

    fence_proxy_async = _ordered_asm("fence.proxy.async.shared::cta;")

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
    def fence_tensor_map(typingctx, tensor_map):
        def codegen(context, builder, sig, args):
            data = context.make_array(sig.args[0])(context, builder, args[0]).data
            _asm(builder, ir.VoidType(), [builder.ptrtoint(data, _i64)],
                 "fence.proxy.tensormap::generic.acquire.gpu [$0], 128;", "l,~{memory}")
            return context.get_dummy_value()
        return types.void(tensor_map), codegen


else:
    import threading
    import time

    import ml_dtypes

    _posted = np.zeros((1024, 6), np.int64)    # what each thread of the block holds
    _posted_float = np.zeros(1024, np.float32)

    def _bf16_value(bits):
        return float(np.uint16(bits).view(ml_dtypes.bfloat16))

    def _bf16_bits(x):
        return int(np.float32(x).astype(ml_dtypes.bfloat16).view(np.uint16))

    def _pair(reg):
        return _bf16_value(int(reg) & 0xFFFF), _bf16_value(int(reg) >> 16)

    @cuda.jit(device=True)
    def mma_bf16_16816(a0, a1, a2, a3, b0, b1, c0, c1, c2, c3):
        tid = cuda.threadIdx.x
        _posted[tid] = a0, a1, a2, a3, b0, b1
        cuda.syncthreads()
        warp = _posted[tid - tid % WARP:][:WARP]
        a = np.zeros((MMA_M, MMA_K))
        b = np.zeros((MMA_K, MMA_N))
        for lane in range(WARP):
            g, t = lane // 4, lane % 4
            for r, (row, col) in enumerate(((g, 0), (g + 8, 0), (g, 8), (g + 8, 8))):
                a[row, col + 2 * t: col + 2 * t + 2] = _pair(warp[lane, r])
            for r in range(2):
                b[8 * r + 2 * t: 8 * r + 2 * t + 2, g] = _pair(warp[lane, 4 + r])
        cuda.syncthreads()
        g, t = tid % WARP // 4, tid % 4
        d = a @ b       # exact in float64 for bf16 products of 16 terms, then one rounding
        return (np.float32(d[g, 2 * t] + c0), np.float32(d[g, 2 * t + 1] + c1),
                np.float32(d[g + 8, 2 * t] + c2), np.float32(d[g + 8, 2 * t + 1] + c3))

    def _ldmatrix(trans):
        @cuda.jit(device=True)
        def ldmatrix(smem, index):
            tid = cuda.threadIdx.x
            _posted[tid, 0] = index
            cuda.syncthreads()
            rows = _posted[tid - tid % WARP:][:WARP, 0]
            g, t = tid % WARP // 4, tid % 4
            regs = []
            for q in range(4):
                matrix = rows[8 * q: 8 * q + 8]
                if trans:
                    lo, hi = smem[matrix[2 * t] + g], smem[matrix[2 * t + 1] + g]
                else:
                    lo, hi = smem[matrix[g] + 2 * t], smem[matrix[g] + 2 * t + 1]
                regs.append(np.uint32(int(lo) | int(hi) << 16))
            cuda.syncthreads()
            return tuple(regs)
        return ldmatrix

    ldmatrix_x4 = _ldmatrix(False)
    ldmatrix_x4_trans = _ldmatrix(True)

    def _cp_async(size, cache):
        @cuda.jit(device=True)
        def cp_async(dst, dst_index, src, src_index, src_bytes):
            # src_bytes of the `size` copied, the rest zeros; the source counted in elements
            # from src's first one, as the device addresses it (a strided view's rows have
            # others between them, which reshape would drop)
            n, count = int(src_bytes) // dst.itemsize, size // dst.itemsize
            source = np.asarray(getattr(src, "_ary", src))
            flat = np.lib.stride_tricks.as_strided(source, (src_index + n,),
                                                   (source.itemsize,), writeable=False)
            out = dst.reshape(-1)
            out[dst_index: dst_index + n] = flat[src_index: src_index + n]
            out[dst_index + n: dst_index + count] = 0
        return cp_async

    cp_async_16 = _cp_async(16, "cg")
    cp_async_4 = _cp_async(4, "ca")

    @cuda.jit(device=True)
    def exp2_ftz(x):
        if x < -126:
            return np.float32(0.0)
        with np.errstate(over="ignore"):    # inf, as the device's ex2 gives
            return np.float32(np.exp2(np.float32(x)))

    @cuda.jit(device=True)
    def rcp_approx(x):
        with np.errstate(divide="ignore", over="ignore"):    # inf, as the device's rcp gives
            return np.float32(1.0) / np.float32(x)


    @cuda.jit(device=True)
    def cp_async_commit():
        pass

    @cuda.jit(device=True)
    def _no_wait():
        pass

    def cp_async_wait_group(n):
        return _no_wait

    @cuda.jit(device=True)
    def pack_bf16x2(lo, hi):
        return np.uint32(_bf16_bits(lo) | _bf16_bits(hi) << 16)

    @cuda.jit(device=True)
    def to_bf16(x):
        return np.uint16(_bf16_bits(x))

    @cuda.jit(device=True)
    def bits_to_float32(bits):
        return np.uint32(bits).view(np.float32)

    @cuda.jit(device=True)
    def shuffle_xor(value, lane_mask):
        tid = cuda.threadIdx.x
        _posted_float[tid] = value
        cuda.syncthreads()
        other = _posted_float[tid ^ lane_mask]
        cuda.syncthreads()
        return np.float32(other)

    @cuda.jit(device=True)
    def opaque(x):
        return np.int32(x)


    @cuda.jit(device=True)
    def shared_address(smem, index):
        # the twin's shared memory starts at address 0: as the GPU's, aligned to 1024
        return np.uint32(2 * index)

    _SWIZZLES = {1: 128, 2: 64, 3: 32}      # descriptor bits 62-63 -> swizzle row bytes

    def _operand(smem, desc, rows, mn_major):
        """The rows x 16 operand (m or n by k) a descriptor describes, in float64."""
        desc = int(desc)
        start, lbo, sbo = (((desc >> shift) & 0x3FFF) << 4 for shift in (0, 16, 32))
        row_bytes = _SWIZZLES[desc >> 62]
        mn, k = np.arange(rows)[:, None], np.arange(MMA_K)[None, :]
        if mn_major:
            width = row_bytes // 2
            byte = (start + (mn % width) * 2 + (mn // width) * lbo + (k % 8) * row_bytes
                    + (k // 8) * sbo)
        else:
            byte = start + (mn % 8) * row_bytes + (mn // 8) * sbo + k * 2
        byte ^= ((byte >> 7) & (row_bytes // 16 - 1)) << 4
        return smem[byte // 2].view(ml_dtypes.bfloat16).astype(np.float64)

    @functools.cache
    def wgmma_bf16(n, trans_a, trans_b):
        @cuda.jit(device=True)
        def wgmma(smem, desc_a, desc_b, acc):
            thread = cuda.threadIdx.x % 128
            g, t = thread % WARP // 4, thread % 4
            row = 16 * (thread // WARP) + g
            a = _operand(smem, desc_a, 64, trans_a)[[row, row + 8]]
            d = a @ _operand(smem, desc_b, n, trans_b).T      # (2, n), exact
            for j in range(n // 8):
                for h in range(2):
                    for e in range(2):
                        r = 4 * j + 2 * h + e
                        acc[r] = np.float32(d[h, 8 * j + 2 * t + e] + acc[r])
        return wgmma

    @cuda.jit(device=True)
    def _acc_no_op(acc):
        pass

    @cuda.jit(device=True)
    def _warpgroup_done(acc):
        # the twin's wgmma is done at once, but by each thread apart: when one thread is
        # past the wait, the instruction's reads of shared memory are over for the whole
        # warpgroup, as on the GPU, only once all its threads have come here
        _wait_named(-1 - cuda.threadIdx.x // 128, 128)

    def warpgroup_fence(regs):
        return _acc_no_op

    def warpgroup_wait(n, regs):
        return _warpgroup_done

    @cuda.jit(device=True)
    def warpgroup_commit():
        pass

    @cuda.jit(device=True)
    def fence_proxy_async():
        pass

    # The mbarrier twins keep each barrier's state here, keyed by its address: (phase
    # parity, arrivals pending, arrivals expected, bytes pending). The simulator runs a
    # block's threads as Python threads, so a waiting thread spins (yielding) while the
    # copying one makes progress.
    _barriers = {}
    _barrier_lock = threading.Lock()

    def _barrier_key(bars, index):
        return bars.__array_interface__["data"][0] + 8 * int(index)

    def _barrier_update(bars, index, arrivals, tx):
        with _barrier_lock:
            state = _barriers[_barrier_key(bars, index)]
            state[1] -= arrivals
            state[3] += tx
            if state[1] == 0 and state[3] == 0:       # the phase completes
                state[0] ^= 1
                state[1] = state[2]

    @cuda.jit(device=True)
    def mbarrier_init(bars, index, count):
        with _barrier_lock:
            _barriers[_barrier_key(bars, index)] = [0, int(count), int(count), 0]

    @cuda.jit(device=True)
    def mbarrier_arrive(bars, index, count):
        _barrier_update(bars, index, int(count), 0)

    @cuda.jit(device=True)
    def mbarrier_arrive_expect_tx(bars, index, nbytes):
        _barrier_update(bars, index, 1, int(nbytes))

    @cuda.jit(device=True)
    def mbarrier_try_wait(bars, index, parity):
        with _barrier_lock:
            done = _barriers[_barrier_key(bars, index)][0] != int(parity)
        if not done:
            time.sleep(0)
        return done

    @cuda.jit(device=True)
    def fence_barrier_init():
        pass

    def _box(tensor_map, matrix, index):
        """(shared-memory indices of a box's elements, its rows, cols): the twin's tensor
        map holds the box (cols, rows), laid in rows of `cols` swizzled as the hardware's
        32-, 64- or 128-byte modes (tiles.swizzled), and the address and shape of the
        matrix it was made for. The hardware copies that matrix whatever the launch passes
        beside the map, so a map of any other fails here."""
        cols, rows = int(tensor_map[0]), int(tensor_map[1])
        described = tuple(int(word) for word in tensor_map[2:6])
        if described != (device_address(matrix), *matrix.shape, matrix.strides[0]):
            raise AssertionError(f"a tensor map of the matrix at {described[0]:#x} "
                                 f"{described[1:3]}, rows {described[3]} bytes apart, used "
                                 f"to copy the one at {device_address(matrix):#x} "
                                 f"{tuple(matrix.shape)}, rows {matrix.strides[0]} apart")
        chunk = 16 // matrix.dtype.itemsize
        rows_per_line, phases = swizzle(cols // chunk)
        r, c = np.arange(rows)[:, None], np.arange(cols)[None, :]
        at = (c // chunk) ^ ((r // rows_per_line) % phases)
        return int(index) + r * cols + at * chunk + c % chunk, rows, cols

    @cuda.jit(device=True)
    def tma_load_2d(smem, index, src, tensor_map, col, row, bars, bar):
        # copied at once, zero-filled past src's edges; then its bytes complete on the
        # barrier
        places, rows, cols = _box(tensor_map, src, index)
        box = np.zeros((rows, cols), src.dtype)
        part = src[row: row + rows, col: col + cols]
        box[:part.shape[0], :part.shape[1]] = part
        smem[places] = box
        _barrier_update(bars, bar, 0, -src.dtype.itemsize * rows * cols)

    def _tma_store(add):
        @cuda.jit(device=True)
        def store(dst, tensor_map, col, row, smem, index):
            places, rows, cols = _box(tensor_map, dst, index)
            rows, cols = min(rows, dst.shape[0] - row), min(cols, dst.shape[1] - col)
            if rows <= 0 or cols <= 0:      # wholly past dst's edges: nothing written
                return
            box = smem[places][:rows, :cols]
            for r in range(rows):       # (the simulator's arrays take a row at a time)
                dst[row + r, col: col + cols] = (dst[row + r, col: col + cols] + box[r]
                                                 if add else box[r])
        return store

    tma_store_2d = _tma_store(False)
    tma_add_2d = _tma_store(True)

    @cuda.jit(device=True)
    def bulk_commit():
        pass

    @cuda.jit(device=True)
    def bulk_wait():
        pass

    _named_barriers = {}

    def _wait_named(barrier, threads):
        with _barrier_lock:
            key = (int(barrier), int(threads))
            if key not in _named_barriers:
                _named_barriers[key] = threading.Barrier(int(threads))
        _named_barriers[key].wait()

    @cuda.jit(device=True)
    def named_barrier(barrier, threads):
        _wait_named(barrier, threads)

    @cuda.jit(device=True)
    def fence_tensor_map(tensor_map):
        pass
