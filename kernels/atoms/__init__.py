"""The atoms: single PTX instructions as numba intrinsics, the layer every kernel builds on.

numba has no tensor-core API. Each atom is one instruction, inlined, its operands in
registers: ``atoms.gpu`` writes them as inline PTX, ``atoms.simulator`` holds their twins
for numba's CUDA simulator (Python functions of the same names and signatures, which the
simulator runs); this package is whichever of the two the process runs on. bf16 values
live in 16-bit unsigned integers (one element) or 32-bit ones (a pair, lower index in the
low half), as the instructions and the uint16 device arrays hold them.

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
  words_to_b64        a 64-bit value of two 32-bit words (mov.b64 {lo, hi}): a wgmma
                      descriptor summed in its low word, its high word constant, which
                      ptxas sees apart (numba's 64-bit sums carry into a register pair)
  warp_uniform        an int32 as lane 0 of the warp holds it (shfl.sync.idx): ptxas then
                      knows it is the same in every lane, and what is computed from it
                      (a warpgroup's tile addresses) runs on the uniform datapath
  wgmma_bf16(n, ta, tb)  D(64xn) += A(64x16) . B(16xn), both from shared memory through
                      64-bit matrix descriptors, bf16 in, float32 accumulate (warpgroup:
                      4 warps, sm_90a); asynchronous: ordered by warpgroup_fence(regs),
                      grouped by warpgroup_commit and waited on with warpgroup_wait(n, regs)
  wgmma_bf16_acc(n, ta, tb)  the same with scale-d an operand: 0 overwrites D
  wgmma_bf16_rs(n, tb)  the same with A from registers: each warp's 16 rows of the
                      64 x 16 A as four bf16 pairs a thread, in the mma.sync A layout (so
                      the accumulators of one wgmma, rounded and paired, are the A of the
                      next: flash attention's P)
  fence_proxy_async   shared-memory writes of this thread (cp.async, st.shared) made
                      visible to the asynchronous proxy that wgmma and the bulk copies use
  mbarrier_init, mbarrier_arrive, mbarrier_arrive_expect_tx, mbarrier_try_wait
                      a shared-memory barrier whose phase completes when its count of
                      arrivals has come and the bytes announced by expect_tx have landed;
                      try_wait(parity) says whether the phase of that parity is complete
                      (fence_barrier_init makes an initialisation visible to the copies)
  tma_load_2d         the bulk tensor copy (sm_90): a box of a 2-D matrix, described by a
                      tensor map (layouts.tensor_map), global -> shared, swizzled, zeros past
                      the matrix's edges, its bytes completing on an mbarrier; issued by
                      one thread (fence_tensor_map: the map, in global memory, read fresh)
  tma_store_2d, tma_add_2d   a box shared -> global, written or added (float32) into the
                      matrix, clipped at its edges; grouped by bulk_commit, its shared
                      memory free again after bulk_wait
  named_barrier(id, n)  bar.sync among n threads (whole warps), not the whole block
  named_barrier_arrive(id, n)  bar.arrive: an arrival at that barrier without the wait
  bulk_wait_but_one   until every bulk group of this thread but the newest has read its
                      shared memory (double-buffered stores: the older buffer free again)
  bulk_wait_written   until every bulk group of this thread has completed its writes
                      (bulk_wait only waits for its reads of shared memory)
  fence_proxy_async_global  this thread's accesses of global memory ordered with the
                      asynchronous proxy's (the bulk copies'): a bulk add completed before
                      a flag is released, or one issued after a flag is seen
  set_max_registers(n, increase)  setmaxnreg: this warpgroup's registers a thread
                      raised or lowered to n from here on (a copying warpgroup's to the
                      computing ones'); a whole-program compile's only (kernels.whole)

Thread block clusters (sm_90; a launch with a cluster shape, gemm.bf16's for the
persistent kernel's clustered tiles; the twins are those of a cluster of one block):
  cluster_rank, cluster_index, cluster_count   the block's rank in its cluster
                      (%cluster_ctarank), its cluster's index along x and the clusters
                      along x (%clusterid.x, %nclusterid.x)
  cluster_sync        barrier.cluster arrive (release) and wait (acquire): every thread
                      of every block of the cluster
  tma_load_2d_multicast   tma_load_2d into the same place of the shared memory of each
                      block of the cluster in the 16-bit mask, completing on the mbarrier
                      at the same place in each
  mbarrier_arrive_cluster(bars, index, rank)   one arrival (release, cluster scope) on the
                      mbarrier at bars[index] of the cluster's block `rank` (mapa)


The loads and stores of activations in float32 or bf16 (``precision`` builds on them):
  load_float32, store_float32   arr[index] as float32, or = value rounded to bf16 if arr
                      is bf16 (a uint16 array of the bit patterns)
  copy_element        dst[i] = src[j] through float32, or the bits when the dtypes match
  load_group4, store_group4   GROUP (4) consecutive elements by one aligned vector access
  load_words4, store_words4   the same without conversion, a tuple of the array's dtype
                      (bf16 pairs as uint32 words: 16 bytes, 8 elements)
  store_pair          a bf16 pair (a uint32 word) into a 2-D bf16 array's element and the
                      next along its row, by one 4-byte store (a row of any pitch)

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
"""
from ..device import SIMULATOR

# every atom, which atoms.gpu defines as PTX and atoms.simulator as a twin (their __all__)
ATOMS = (
    "mma_bf16_16816", "ldmatrix_x4", "ldmatrix_x4_trans", "cp_async_16", "cp_async_4",
    "cp_async_commit", "cp_async_wait_group", "exp2_ftz", "rcp_approx", "pack_bf16x2",
    "to_bf16", "bits_to_float32", "shuffle_xor", "opaque", "shared_address",
    "words_to_b64", "warp_uniform", "store_pair",
    "wgmma_bf16", "warpgroup_fence", "warpgroup_commit", "warpgroup_wait",
    "wgmma_bf16_acc", "wgmma_bf16_rs", "named_barrier_arrive",
    "fence_proxy_async", "mbarrier_init", "mbarrier_arrive",
    "mbarrier_arrive_expect_tx", "mbarrier_try_wait", "fence_barrier_init",
    "tma_load_2d", "tma_store_2d", "tma_add_2d", "bulk_commit", "bulk_wait",
    "named_barrier", "fence_tensor_map", "load_float32", "store_float32",
    "copy_element", "load_group4", "store_group4", "load_words4", "store_words4",
    "bulk_wait_but_one", "cluster_rank", "cluster_index", "cluster_count", "cluster_sync",
    "tma_load_2d_multicast", "mbarrier_arrive_cluster", "bulk_wait_written",
    "fence_proxy_async_global", "set_max_registers",
)

if SIMULATOR:
    from .simulator import *  # noqa: F403
else:
    from .gpu import *  # noqa: F403
