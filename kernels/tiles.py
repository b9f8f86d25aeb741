"""Tiles in shared memory for the tensor-core kernels: layout, copy in, fragments out.

The layer between the instruction atoms of ``mma`` and the kernels built from them (the
bf16 GEMM, flash attention). A tile is a rows x cols block of a row-major bf16 matrix,
cols a multiple of 8, stored row by row in a uint16 shared array with its 16-byte chunks
XOR-swizzled within each row: ldmatrix reads eight rows at one chunk column, and without
the swizzle rows whose length is a multiple of 128 bytes (or of 64 or 32, two or four rows
apart) would all hit the same four banks; with it the eight reads land in eight distinct
16-byte bank groups, and so do cp.async's writes of a row's chunks.

Whichever way a matrix lies in global memory, its tile keeps that layout (the copies stay
16-byte and coalesced) and the fragment loader chooses ldmatrix or ldmatrix.trans:
  an mma A operand (m x k) from a tile [m][k] ("k-major") or [k][m] ("m-major"),
  an mma B operand (k x n) from a tile [n][k] or [k][n].
"""
from numba import cuda, int32, int64, uint16, uint32

from microgpt.kernels.mma import (CHUNK, cp_async_16, ldmatrix_x4, ldmatrix_x4_trans)


def swizzled(cols):
    """index(row, col): where element (row, col) of a tile `cols` wide sits in shared
    memory. col is a multiple of 8 where a chunk is addressed, any col otherwise."""
    chunks = cols // CHUNK
    rows_per_line = max(1, 8 // chunks)       # rows sharing one 128-byte line of banks
    phases = min(chunks, 8)

    @cuda.jit(device=True, inline=True)
    def index(row, col):
        chunk = (col // CHUNK) ^ ((row // rows_per_line) % phases)
        return row * cols + chunk * CHUNK + col % CHUNK
    return index


def tile_copier(rows, cols, threads, aligned):
    """copy(smem, base, src, row0, col0): the rows x cols tile of src (R, C) at (row0, col0)
    into smem[base:] in the swizzled layout, zeros where it overhangs src.

    aligned: C is a multiple of 8 (so every chunk of a row starts 16-byte aligned and lies
    wholly inside or outside src): 16-byte cp.async, left in flight for the caller to
    commit and wait on. Otherwise element by element through registers, complete on
    return."""
    index = swizzled(cols)
    chunks_per_row = cols // CHUNK

    @cuda.jit(device=True, inline=True)
    def copy_async(smem, base, src, row0, col0):
        R, C = src.shape
        for e in range(cuda.threadIdx.x, rows * chunks_per_row, threads):
            r = e // chunks_per_row
            c = (e % chunks_per_row) * CHUNK
            inside = row0 + r < R and col0 + c < C
            at = int64(row0 + r) * C + col0 + c if inside else int64(0)
            cp_async_16(smem, int32(base + index(r, c)), src, at,
                        uint32(16 if inside else 0))

    @cuda.jit(device=True, inline=True)
    def copy_sync(smem, base, src, row0, col0):
        R, C = src.shape
        for e in range(cuda.threadIdx.x, rows * cols, threads):
            r, c = e // cols, e % cols
            inside = row0 + r < R and col0 + c < C
            smem[base + index(r, c)] = src[row0 + r, col0 + c] if inside else uint16(0)

    return copy_async if aligned else copy_sync


def a_fragment_loader(cols, m_major):
    """load(smem, base, m, k) -> (a0, a1, a2, a3): the mma A fragment of the 16 x 16 block
    whose top-left element is (m, k), from a tile [m][k] `cols` wide, or [k][m] when
    m_major."""
    index = swizzled(cols)

    @cuda.jit(device=True, inline=True)
    def load(smem, base, m, k):
        lane = cuda.threadIdx.x % 32
        if m_major:     # lanes 8q..8q+7 address k rows of matrix q = (k half, m half)
            return ldmatrix_x4_trans(smem, int32(base + index(
                k + (lane // 16) * 8 + lane % 8, m + (lane // 8) % 2 * 8)))
        return ldmatrix_x4(smem, int32(base + index(m + lane % 16, k + (lane // 16) * 8)))
    return load


def b_fragment_loader(cols, n_major):
    """load(smem, base, k, n) -> (b0, b1 of columns n..n+7; b0, b1 of n+8..n+15): the mma
    B fragments of the 16 x 16 block at (k, n), from a tile [k][n] `cols` wide, or [n][k]
    when n_major."""
    index = swizzled(cols)

    @cuda.jit(device=True, inline=True)
    def load(smem, base, k, n):
        lane = cuda.threadIdx.x % 32
        if n_major:
            return ldmatrix_x4(smem, int32(base + index(
                n + (lane // 16) * 8 + lane % 8, k + (lane // 8) % 2 * 8)))
        return ldmatrix_x4_trans(smem, int32(base + index(
            k + (lane // 8) % 2 * 8 + lane % 8, n + (lane // 16) * 8)))
    return load
