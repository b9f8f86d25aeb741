"""The float32 GEMM on the CUDA cores: out (M, N) = op(a) @ op(b), the ``--precision fp32``
path of every matmul of the model (``gemm.matmul`` routes float32 operands here).

NumPy twins: ``microgpt.reference.matmul_forward`` / ``matmul_backward``. One kernel body
serves the fused QKV projection (X @ W_qkv, one launch for all heads), W_O and the MLP,
their backward products (dX = dY @ W^T, dW += X^T @ dY) and the tied LM head (x @ wte^T,
dlogits @ wte, dwte += dlogits^T @ x). Whether a or b is transposed and whether out is
accumulated into are compile-time constants of the kernel, chosen by a cached factory.

How a block works (``GemmTile``): it owns a rows x cols tile of out and marches over K in
steps of `depth`. Each step stages op(a)'s rows x depth slab and op(b)'s depth x cols slab
in shared memory, both k-major (tile[k, m]) so the inner loop reads one k-row of each.
Each thread keeps a thread_rows x thread_cols block of out in registers and, per k, loads
thread_rows + thread_cols values from shared memory for thread_rows * thread_cols FMAs.
A thread's rows and columns are strided by the number of threads along that axis, so a
warp's shared-memory reads hit distinct banks (or broadcast) and its writes to out are
contiguous. The slabs are double-buffered and the next one is fetched into registers while
the current one is multiplied: one barrier per step. Loads past M, N or K read zeros and
writes past M or N are skipped, so any shape works. Accumulation is float32.
"""
import functools
from typing import NamedTuple

from numba import cuda, float32, uint64

from ..cache import jit
from ..common import ceil_div, check_array
from ..device import SMS, check_block
from .bias import check_bias, unread_bias


class GemmTile(NamedTuple):
    """One block's share of out: a rows x cols tile marched over K in steps of depth; each
    thread holds a thread_rows x thread_cols register block of it."""
    rows: int
    cols: int
    depth: int
    thread_rows: int
    thread_cols: int

    @property
    def threads(self):
        return (self.rows // self.thread_rows) * (self.cols // self.thread_cols)


# 128 x 128 with 8 x 8 per thread: 16 shared loads per 64 FMAs, 256 threads
LARGE_TILE = GemmTile(128, 128, 8, 8, 8)
# 64 x 64 and 32 x 32 with 4 x 4 per thread (256 and 64 threads): more blocks, for outputs
# too small to fill the GPU with large tiles (the weight gradients, small models)
MEDIUM_TILE = GemmTile(64, 64, 8, 4, 4)
SMALL_TILE = GemmTile(32, 32, 8, 4, 4)
# the GPU is full once the grid has about two blocks per SM
FULL_GRID_BLOCKS = 2 * SMS
# padding of a k-major shared slab's rows: a warp's store of a k-contiguous operand spans
# depth slab rows, which a row length of 4 mod 32 puts in distinct banks (depth 8)
SLAB_PAD = 4


def check_tile(tile):
    """A GemmTile the kernel can run: whole register blocks, <= 1024 threads, and slabs that
    split evenly over the threads."""
    rows, cols, depth, thread_rows, thread_cols = tile
    if min(tile) < 1 or rows % thread_rows or cols % thread_cols:
        raise ValueError(f"tile {tile}: rows and cols must be positive multiples of "
                         "thread_rows and thread_cols")
    check_block(f"tile {tile}", tile.threads)
    if (rows * depth) % tile.threads or (cols * depth) % tile.threads:
        raise ValueError(f"tile {tile}: rows * depth and cols * depth must be multiples of "
                         f"the {tile.threads} threads")


def default_tile(M, N):
    """The largest tile whose grid still fills the GPU, else the small one."""
    for tile in (LARGE_TILE, MEDIUM_TILE):
        if ceil_div(M, tile.rows) * ceil_div(N, tile.cols) >= FULL_GRID_BLOCKS:
            return tile
    return SMALL_TILE


# ----------------------------------------------------------------------------------
# kernel

def _slab_loader(extent, depth, threads, k_contiguous):
    """Device functions that move a depth x extent slab of an operand, global -> registers
    (fetch) and registers -> one of two k-major shared buffers (store). The operand is
    src[mn, k] when k_contiguous (a of a @ b, or b of a @ b^T), else src[k, mn]; each
    thread moves extent * depth / threads elements, consecutive threads taking
    consecutive global addresses."""
    per_thread = extent * depth // threads
    row = extent + SLAB_PAD

    @cuda.jit(device=True)
    def fetch(regs, src, mn0, k0, MN, K):
        # regs (per_thread,), src (MN, K) or (K, MN)
        for r in range(per_thread):
            e = cuda.threadIdx.x + threads * r
            if k_contiguous:
                mn, k = mn0 + e // depth, k0 + e % depth
                regs[r] = src[mn, k] if mn < MN and k < K else float32(0.0)
            else:
                k, mn = k0 + e // extent, mn0 + e % extent
                regs[r] = src[k, mn] if mn < MN and k < K else float32(0.0)

    @cuda.jit(device=True)
    def store(slabs, buf, regs):
        # slabs (2 * depth * row,): element (buf, k, mn) at (buf * depth + k) * row + mn
        for r in range(per_thread):
            e = cuda.threadIdx.x + threads * r
            if k_contiguous:
                k, mn = e % depth, e // depth
            else:
                k, mn = e // extent, e % extent
            slabs[(buf * depth + k) * row + mn] = regs[r]

    return per_thread, fetch, store


@functools.cache
def _matmul_kernel(transpose_a, transpose_b, accumulate, tile, biased=False):
    BM, BN, BK, TM, TN = tile
    row_threads, col_threads = BM // TM, BN // TN
    a_per_thread, fetch_a, store_a = _slab_loader(BM, BK, tile.threads, not transpose_a)
    b_per_thread, fetch_b, store_b = _slab_loader(BN, BK, tile.threads, transpose_b)
    a_row, b_row = BM + SLAB_PAD, BN + SLAB_PAD
    a_slabs_size, b_slabs_size = 2 * BK * a_row, 2 * BK * b_row

    @jit
    def matmul_kernel(out, a, b, bias):
        # out (M, N); a (M, K), or (K, M) when transpose_a; b (K, N), or (N, K) when
        # transpose_b; bias (N,), added to every row when biased (else not read). Block
        # (x, y) owns out[y*BM : (y+1)*BM, x*BN : (x+1)*BN].
        M, N = out.shape
        K = a.shape[0] if transpose_a else a.shape[1]
        m0 = cuda.blockIdx.y * BM
        n0 = cuda.blockIdx.x * BN
        ty = cuda.threadIdx.x // col_threads
        tx = cuda.threadIdx.x % col_threads

        a_slabs = cuda.shared.array(a_slabs_size, float32)
        b_slabs = cuda.shared.array(b_slabs_size, float32)
        a_next = cuda.local.array(a_per_thread, float32)
        b_next = cuda.local.array(b_per_thread, float32)
        a_frag = cuda.local.array(TM, float32)
        b_frag = cuda.local.array(TN, float32)
        acc = cuda.local.array((TM, TN), float32)
        for i in range(TM):
            for j in range(TN):
                acc[i, j] = float32(0.0)

        n_steps = (K + BK - 1) // BK
        if n_steps > 0:
            fetch_a(a_next, a, m0, 0, M, K)
            fetch_b(b_next, b, n0, 0, N, K)
            store_a(a_slabs, 0, a_next)
            store_b(b_slabs, 0, b_next)
            cuda.syncthreads()
        for step in range(n_steps):
            buf = step & 1
            has_next = step + 1 < n_steps
            if has_next:    # in flight while this step's FMAs run
                fetch_a(a_next, a, m0, (step + 1) * BK, M, K)
                fetch_b(b_next, b, n0, (step + 1) * BK, N, K)
            for kk in range(BK):
                # uint64 indices: numba then skips its negative-index wraparound, a compare
                # and select per load that would double the integer work of this loop
                a_at = (buf * BK + kk) * a_row + ty
                b_at = (buf * BK + kk) * b_row + tx
                for i in range(TM):
                    a_frag[i] = a_slabs[uint64(a_at + row_threads * i)]
                for j in range(TN):
                    b_frag[j] = b_slabs[uint64(b_at + col_threads * j)]
                for i in range(TM):
                    for j in range(TN):
                        acc[i, j] += a_frag[i] * b_frag[j]
            if has_next:    # the other buffer was last read before the previous barrier
                store_a(a_slabs, 1 - buf, a_next)
                store_b(b_slabs, 1 - buf, b_next)
            cuda.syncthreads()

        for i in range(TM):
            row = m0 + ty + row_threads * i
            if row < M:
                for j in range(TN):
                    col = n0 + tx + col_threads * j
                    if col < N:
                        if accumulate:
                            out[row, col] += acc[i, j]
                        elif biased:
                            out[row, col] = acc[i, j] + bias[col]
                        else:
                            out[row, col] = acc[i, j]

    return matmul_kernel


_MATRIX, _VECTOR = float32[:, ::1], float32[::1]
PTX_SIGNATURES = [
    (_matmul_kernel(transpose_a, transpose_b, accumulate, LARGE_TILE),
     (_MATRIX,) * 3 + (_VECTOR,))
    for transpose_a, transpose_b, accumulate in [
        (False, False, False),   # X @ W
        (False, True, False),    # dY @ W^T, x @ wte^T
        (True, False, True),     # dW += X^T @ dY
        (True, True, True),      # every flag flipped at once
    ]
] + [(_matmul_kernel(False, False, False, tile), (_MATRIX,) * 3 + (_VECTOR,))
       for tile in (MEDIUM_TILE, SMALL_TILE)] + [
    # a config with biases: X @ W + b
    (_matmul_kernel(False, False, False, LARGE_TILE, True), (_MATRIX,) * 3 + (_VECTOR,)),
    # a of a view of some of a wider matrix's columns (the GEMMs take views)
    (_matmul_kernel(True, False, True, LARGE_TILE),
     (_MATRIX, float32[:, :], _MATRIX, _VECTOR))]


# ----------------------------------------------------------------------------------
# launcher

def matmul(out, a, b, transpose_a=False, transpose_b=False, accumulate=False, bias=None, *,
           tile=None, stream=0):
    """out (M, N) = op(a) @ op(b) in float32 (+ bias (N,) on every row, in the epilogue),
    op transposing when asked; += when accumulate (then without a bias).

    a is (M, K), or (K, M) when transpose_a; b is (K, N), or (N, K) when transpose_b; each
    a matrix or a view of some of a wider one's columns. tile (a GemmTile) overrides the
    shape-based default."""
    for name, arr in (("out", out), ("a", a), ("b", b)):
        if len(arr.shape) != 2:
            raise ValueError(f"{name}: expected a 2-D matrix, got shape {tuple(arr.shape)}")
    M, N = out.shape
    K = a.shape[0] if transpose_a else a.shape[1]
    check_array("out", out, (M, N))
    # the kernel reads a and b by numba's indexing, through their strides: a view (of some
    # of a wider matrix's columns) compiles a kernel for it
    check_array("a", a, (K, M) if transpose_a else (M, K), strided=True)
    check_array("b", b, (N, K) if transpose_b else (K, N), strided=True)
    check_bias(bias, N, accumulate)
    tile = default_tile(M, N) if tile is None else GemmTile(*tile)
    check_tile(tile)
    if M == 0 or N == 0:
        return
    kernel = _matmul_kernel(bool(transpose_a), bool(transpose_b), bool(accumulate), tile,
                            bias is not None)
    grid = (ceil_div(N, tile.cols), ceil_div(M, tile.rows))
    kernel[grid, tile.threads, stream](out, a, b, unread_bias(out) if bias is None else bias)
