"""Fragments: which lane holds which element of an mma operand or accumulator, and how
the operands get there.

ldmatrix (``atoms.ldmatrix_x4``) reads the 16 x 16 blocks of an operand out of a swizzled
tile (``layouts.tiles``) into the registers the mma instruction takes:
  an mma A operand (m x k) from a tile [m][k] ("k-major") or [k][m] ("m-major"),
  an mma B operand (k x n) from a tile [n][k] or [k][n].
The accumulators come back in the layout the atoms' docstring gives; the maps here name
it, for every kernel that reads or writes them by coordinates (masks, epilogues):
  accumulator_row, accumulator_col   where c0 of a thread's 16 x 8 mma tile lies (c1 the
                      column after it, c2 and c3 the row 8 below)
  wgmma_accumulator_row              the row of d[4j], d[4j + 1] of a warpgroup's
                      thread in its 64 x N wgmma accumulator (columns 8j +
                      accumulator_col and the next; d[4j + 2], d[4j + 3] the row 8 below)
"""
from numba import cuda

from ..atoms import ldmatrix_x4, ldmatrix_x4_trans
from ..device import WARP
from .tiles import swizzled


@cuda.jit(device=True, inline=True)
def accumulator_row(thread):
    """The row of its 16 x 8 mma accumulator tile whose c0, c1 `thread` holds (c2, c3: 8
    rows below): the group of 4 lanes it is in."""
    return thread % WARP // 4


@cuda.jit(device=True, inline=True)
def accumulator_col(thread):
    """The column of c0 in its tile (c1: the next), of an mma accumulator or, 8 columns a
    step, of a wgmma one."""
    return 2 * (thread % 4)


@cuda.jit(device=True, inline=True)
def wgmma_accumulator_row(thread):
    """The row of its warpgroup's 64 x N wgmma accumulator whose d[4j], d[4j + 1] `thread`
    (of the warpgroup's 128) holds: 16 rows a warp, the mma tile's layout inside."""
    return 16 * (thread // WARP) + accumulator_row(thread)


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
