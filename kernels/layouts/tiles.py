"""Tiles in shared memory for the tensor-core kernels: their swizzled layout and the copy in.

The layer between the instruction atoms (``atoms``) and the kernels built from them (the
bf16 GEMM, flash attention); the fragments out of a tile are ``layouts.fragments``'. A
tile is a rows x cols block of a row-major bf16 matrix, cols a multiple of 8, stored row
by row in a uint16 shared array with its 16-byte chunks XOR-swizzled within each row:
ldmatrix reads eight rows at one chunk column, and without the swizzle rows whose length
is a multiple of 128 bytes (or of 64 or 32, two or four rows apart) would all hit the same
four banks; with it the eight reads land in eight distinct 16-byte bank groups, and so do
cp.async's writes of a row's chunks.

Whichever way a matrix lies in global memory, its tile keeps that layout (the copies stay
16-byte and coalesced) and the fragment loaders (``layouts.fragments``) choose ldmatrix or
ldmatrix.trans.

For wgmma, which reads its operands from shared memory itself, the tile is what the
hardware's swizzle modes describe: rows of 16, 32 or 64 elements (32, 64 or 128 bytes),
a wider tile cut into panels of 64 columns stored one after another (`paneled`). With rows
of 2^p chunks the XOR above flips chunk bits by row bits exactly as the 32-, 64- and
128-byte swizzles flip address bits 4.. by bits 7.. (8 rows of 128 bytes, 16 of 64, 32 of
32 make the 1024 bytes of one pattern), so a tile whose start is 1024-byte aligned is one
wgmma operand as it stands; `wgmma_operand` gives its descriptor's constant fields. The
bulk tensor copy engine writes the same swizzle when it copies a box of a matrix in
(``layouts.tensor_maps`` describes the matrix and the box to it), and reads it when it
copies one out.
"""

import numpy as np
from numba import cuda, int32, int64, uint16, uint32, uint64

from ..atoms import cp_async_16, shared_address
from ..device import CHUNK, MMA_K, swizzle

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
