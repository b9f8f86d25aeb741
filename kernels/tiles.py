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

For wgmma, which reads its operands from shared memory itself, the tile is what the
hardware's swizzle modes describe: rows of 16, 32 or 64 elements (32, 64 or 128 bytes),
a wider tile cut into panels of 64 columns stored one after another (`paneled`). With rows
of 2^p chunks the XOR above flips chunk bits by row bits exactly as the 32-, 64- and
128-byte swizzles flip address bits 4.. by bits 7.. (8 rows of 128 bytes, 16 of 64, 32 of
32 make the 1024 bytes of one pattern), so a tile whose start is 1024-byte aligned is one
wgmma operand as it stands; `wgmma_operand` gives its descriptor's constant fields. The
bulk tensor copy engine writes the same swizzle when it copies a box of a matrix in
(`tensor_map` describes the matrix and the box to it), and reads it when it copies one out.
"""

import numpy as np
from numba import cuda, int32, int64, uint16, uint32, uint64

from microgpt.kernels.common import SIMULATOR, device_address, kept_with
from microgpt.kernels.mma import (CHUNK, MMA_K, cp_async_16, ldmatrix_x4, ldmatrix_x4_trans,
                                  shared_address, swizzle)

PANEL = 64     # the widest swizzled row (128 bytes) in bf16 elements


def swizzled(cols):
    """index(row, col): where element (row, col) of a tile `cols` wide sits in shared
    memory. col is a multiple of 8 where a chunk is addressed, any col otherwise."""
    rows_per_line, phases = swizzle(cols // CHUNK)

    @cuda.jit(device=True, inline=True)
    def index(row, col):
        chunk = (col // CHUNK) ^ ((row // rows_per_line) % phases)
        return row * cols + chunk * CHUNK + col % CHUNK
    return index


def paneled(rows, cols):
    """index(row, col) of a rows x cols tile stored as panels PANEL columns wide (or one of
    cols, when narrower), one after another, each swizzled: the layout wgmma reads."""
    width = min(cols, PANEL)
    if cols % width or width not in (16, 32, 64):
        raise ValueError(f"a wgmma tile {cols} wide: the width must be 16, 32, or a "
                         f"multiple of {PANEL}")
    inner = swizzled(width)

    @cuda.jit(device=True, inline=True)
    def index(row, col):
        return (col // width) * (rows * width) + inner(row, col % width)
    return index


def wgmma_operand(rows, cols, k_is_row):
    """(fields, k_step) of a wgmma operand in a `paneled` rows x cols tile whose rows are k
    (an MN-major operand) or whose columns are (K-major, cols <= PANEL): the descriptor's
    constant bits (leading and stride byte offsets, swizzle), and what its start address
    field advances by for the next 16 of k."""
    width = min(cols, PANEL)
    row_bytes = 2 * width
    swizzle = {128: 1, 64: 2, 32: 3}[row_bytes]
    if k_is_row:    # the leading offset steps to the next panel of m (or n), the stride 8 k
        lead, stride, k_step = rows * row_bytes, 8 * row_bytes, MMA_K * row_bytes
    else:           # a row holds all of k: the leading offset is unused (16 by convention)
        if cols > PANEL:
            raise ValueError(f"a K-major wgmma tile {cols} deep: at most {PANEL}")
        lead, stride, k_step = 16, 8 * row_bytes, 2 * MMA_K
    fields = (lead >> 4) << 16 | (stride >> 4) << 32 | swizzle << 62
    return np.uint64(fields), k_step >> 4


@cuda.jit(device=True, inline=True)
def descriptor(smem, index, fields):
    """The wgmma matrix descriptor of the operand whose first chunk is smem[index]."""
    return uint64((shared_address(smem, index) >> 4) & 0x3FFF) | fields


def tma_ready(matrix):
    """Whether the bulk tensor copy can read or write a matrix: its rows' elements next to
    each other, the rows starting 16 bytes apart (the matrix's own, or a view of some of
    a wider one's columns) and its data on a 16-byte boundary (what a tensor map
    requires)."""
    row_pitch, element_pitch = matrix.strides
    return element_pitch == matrix.dtype.itemsize and row_pitch % 16 == 0 and (
        SIMULATOR or matrix.__cuda_array_interface__["data"][0] % 16 == 0)


def tensor_map(matrix, box_rows, box_cols):
    """The tensor map with which the bulk tensor copies move box_rows x box_cols boxes
    between the row-major matrix (bf16 as uint16, or float32; tma_ready: a view of some
    of a wider matrix's columns too, its rows then further apart) and shared
    memory, where a box lies in rows of box_cols (32, 64 or 128 bytes) whose 16-byte
    chunks are XOR-swizzled as `swizzled` lays out bf16 tiles; zeros are read past the
    matrix's edges and nothing is written there. A device array of its sixteen 64-bit
    words, which the copies read from global memory: encoded by the driver and copied over
    once per address, shape, row pitch and box while the matrix's memory lives, so a
    captured step's launches find theirs made by the eager run before the capture. (The
    simulator's twin holds the box and the matrix it describes, which the twin's copies
    check.)"""
    if not tma_ready(matrix):
        raise ValueError(f"tensor_map: a {tuple(matrix.shape)} matrix with strides "
                         f"{tuple(matrix.strides)}; a tensor map describes one whose rows' "
                         "elements are adjacent and whose rows start 16-byte aligned")
    R, C = matrix.shape
    # a captured step's launches hold their maps' addresses: a map lives as long as its
    # matrix's allocation (common.kept_with), and an address that a new allocation reuses
    # finds none of the old one's
    key = (device_address(matrix), R, C, matrix.strides[0], matrix.dtype.itemsize, box_rows,
           box_cols)
    return kept_with(matrix, key, lambda: _encode(*key))


def _encode(address, R, C, pitch, size, box_rows, box_cols):
    if SIMULATOR:
        return np.array([box_cols, box_rows, address, R, C, pitch] + [0] * 10, np.uint64)
    from numba.cuda.cudadrv.driver import binding as cu

    kind = {2: cu.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_UINT16,
            4: cu.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_FLOAT32}[size]
    swizzle = {32: cu.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_32B,
               64: cu.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_64B,
               128: cu.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_128B}[size * box_cols]
    status, encoded = cu.cuTensorMapEncodeTiled(
        kind, 2, address, [cu.cuuint64_t(C), cu.cuuint64_t(R)], [cu.cuuint64_t(pitch)],
        [cu.cuuint32_t(box_cols), cu.cuuint32_t(box_rows)], [cu.cuuint32_t(1)] * 2,
        cu.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle,
        cu.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
        cu.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE)
    if status != cu.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"cuTensorMapEncodeTiled failed ({status.name}) for a {R} x {C} "
                           f"matrix (rows {pitch} bytes apart) in boxes of {box_rows} x "
                           f"{box_cols}")
    return cuda.to_device(np.array([int(word) for word in encoded.opaque], np.uint64))


def tile_copier(rows, cols, threads, aligned, width=None):
    """copy(smem, base, src, row0, col0, pitch): the rows x cols tile of src (R, C) at
    (row0, col0) into smem[base:] in the swizzled layout, zeros where it overhangs src.
    pitch: the elements from one row of src to the next, C for a matrix of its own, more
    for a view of some of a wider matrix's columns (flash attention reads each head out
    of the fused QKV rows); the caller reads it once, from the strides, and may hold one
    for several arrays that lie alike (registers flash attention's forward has none of to
    spare). width: C, where the caller knows it when compiling (a head's D).

    aligned: C and the pitch are multiples of 8 and src starts 16-byte aligned (so every
    chunk of a row starts 16-byte aligned and lies wholly inside or outside src): 16-byte
    cp.async, left in flight for the caller to commit and wait on. Otherwise element by
    element through registers, complete on return."""
    index = swizzled(cols)
    chunks_per_row = cols // CHUNK
    chunks = rows * chunks_per_row
    # a fixed number of chunks per thread when they divide evenly: the loop then unrolls
    # and each chunk's place in the tile (a function of the thread alone) is computed once
    # per kernel rather than once per slab
    per_thread = chunks // threads if chunks % threads == 0 else 0

    @cuda.jit(device=True, inline=True)
    def copy_chunk(smem, base, src, row0, col0, pitch, e):
        R, C = src.shape[0], width or src.shape[1]
        r = e // chunks_per_row
        c = (e % chunks_per_row) * CHUNK
        inside = row0 + r < R and col0 + c < C
        at = int64(row0 + r) * pitch + col0 + c if inside else int64(0)
        cp_async_16(smem, int32(base + index(r, c)), src, at, uint32(16 if inside else 0))

    @cuda.jit(device=True, inline=True)
    def copy_async(smem, base, src, row0, col0, pitch):
        if per_thread:
            for i in range(per_thread):
                copy_chunk(smem, base, src, row0, col0, pitch, cuda.threadIdx.x + threads * i)
        else:
            for e in range(cuda.threadIdx.x, chunks, threads):
                copy_chunk(smem, base, src, row0, col0, pitch, e)

    @cuda.jit(device=True, inline=True)
    def copy_sync(smem, base, src, row0, col0, pitch):
        # numba's indexing reads src's own strides: pitch is for the 16-byte copies
        R, C = src.shape[0], width or src.shape[1]
        for e in range(cuda.threadIdx.x, rows * cols, threads):
            r, c = e // cols, e % cols
            inside = row0 + r < R and col0 + c < C
            smem[base + index(r, c)] = src[row0 + r, col0 + c] if inside else uint16(0)

    return copy_async if aligned else copy_sync


def a_fragment_loader(cols, m_major):
    """(locate, advance, load) for mma A fragments from a tile [m][k] `cols` wide, or
    [k][m] when m_major. locate(m, k) is this lane's ldmatrix index for the 16 x 16 block
    at (m, k); advance(index, kk) moves it kk (a multiple of 16) further along k, cheaply,
    so that kernels locate once and advance in their inner loop; load(smem, index) returns
    (a0, a1, a2, a3). For a k-major tile cols must be a power of two: moving along k then
    flips chunk bits above the lane's own, which commutes with the swizzle's XOR."""
    index = swizzled(cols)

    @cuda.jit(device=True, inline=True)
    def locate(m, k):
        lane = cuda.threadIdx.x % 32
        if m_major:     # lanes 8q..8q+7 address k rows of matrix q = (k half, m half)
            return index(k + (lane // 16) * 8 + lane % 8, m + (lane // 8) % 2 * 8)
        return index(m + lane % 16, k + (lane // 16) * 8)

    return locate, _advancer(cols, m_major), ldmatrix_x4_trans if m_major else ldmatrix_x4


def b_fragment_loader(cols, n_major):
    """(locate, advance, load) for mma B fragments from a tile [k][n] `cols` wide, or [n][k]
    when n_major, as a_fragment_loader; load returns (b0, b1 of columns n..n+7; b0, b1 of
    n+8..n+15) for the 16 x 16 block at (k, n) that locate(k, n) located."""
    index = swizzled(cols)

    @cuda.jit(device=True, inline=True)
    def locate(k, n):
        lane = cuda.threadIdx.x % 32
        if n_major:
            return index(n + (lane // 16) * 8 + lane % 8, k + (lane // 8) % 2 * 8)
        return index(k + (lane // 8) % 2 * 8 + lane % 8, n + (lane // 16) * 8)

    return locate, _advancer(cols, not n_major), ldmatrix_x4 if n_major else ldmatrix_x4_trans


def _advancer(cols, k_is_row):
    """advance(index, kk): the index kk further along k, in a tile whose rows are k
    (k_is_row) or whose columns are."""
    if not k_is_row and cols & (cols - 1):
        raise ValueError(f"a k-major tile {cols} wide: the width must be a power of two")

    @cuda.jit(device=True, inline=True)
    def advance(at, kk):
        return at + kk * cols if k_is_row else at ^ kk
    return advance
