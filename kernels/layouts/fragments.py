"""Fragments: which lane holds which element of an mma operand, and how it gets there.

ldmatrix (``atoms.ldmatrix_x4``) reads the 16 x 16 blocks of an operand out of a swizzled
tile (``layouts.tiles``) into the registers the mma instruction takes:
  an mma A operand (m x k) from a tile [m][k] ("k-major") or [k][m] ("m-major"),
  an mma B operand (k x n) from a tile [n][k] or [k][n].
"""
from numba import cuda

from ..atoms import ldmatrix_x4, ldmatrix_x4_trans
from .tiles import swizzled


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
