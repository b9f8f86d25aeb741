"""The operands of the Hopper attention passes (``hopper``'s forward, ``hopper_backward``'s
dq and dk/dv passes) as the bulk copies and wgmma take them: head arrays as views of 2-D
matrices (head_matrix), the copies of a pair of tiles (pair_copier), the issuers of the
passes' two kinds of product with their descriptors (products; fold_product, the dk/dv
pass's dq where it folds it), the causal mask of a
tile of scores in the accumulators (causal_mask), and the passes' launch (launch_pass).

q, k, v (and dout) as the bulk copies see them: a head array (B, H, T, D) is a view of a
2-D matrix, either (B H T, D) (the heads one after another: arrays of their own) or (B T,
H D) (the heads side by side: the parts of the fused QKV rows the bf16 step passes),
and the tile of query or key rows t0.. of head (b, h) is the box at row b rb + h rh + t0,
column h ch (`layout`). A box that runs past row T of its head reads the next head's
rows, or zeros past the matrix: those keys are masked, those queries never written.
"""
import functools
import importlib

import numba
import numpy as np
from numba import cuda, int32, uint32

from ..atoms import (shared_address, tma_load_2d, warpgroup_commit, warpgroup_fence,
                     wgmma_bf16_acc, wgmma_bf16_rs, words_to_b64)
from ..common import device_address
from ..device import MMA_K, SIMULATOR, allow_dynamic_shared
from ..layouts.tensor_maps import tma_ready
from ..layouts.tiles import PANEL, wgmma_operand


@functools.cache
def pair_copier(rows, D):
    """copy(smem, at, bars, barrier, a, a_map, a_row, a_col, b, b_map, b_row, b_col):
    `rows` rows of a head of each of the matrices a and b (q's and dout's, k's and v's),
    from (a_row, a_col) and (b_row, b_col), by the bulk copies into smem from element `at`
    (a's) and `at + rows D` (b's), panel by panel, completing on bars[barrier]; the caller
    announces the bytes."""
    panels, panel = D // PANEL, rows * PANEL

    @cuda.jit(device=True, inline=True)
    def copy(smem, at, bars, barrier, a, a_map, a_row, a_col, b, b_map, b_row, b_col):
        for p in range(panels):
            tma_load_2d(smem, at + p * panel, a, a_map, a_col + p * PANEL, a_row, bars,
                        barrier)
            tma_load_2d(smem, at + rows * D + p * panel, b, b_map, b_col + p * PANEL, b_row,
                        bars, barrier)
    return copy


NEG_INF = np.float32(-np.inf)


@functools.cache
def causal_mask(N, transposed=False):
    """mask(s, row, first, col, T): the scores s (a thread's accumulators of a 64 x N tile
    from columns first.., its rows row and row + 8, its columns first + col + 8 j and the
    one after) set to -inf where the pair is not causal or past T: with the rows queries
    and the columns keys, a key past the row's query; transposed (S^T: the rows keys, the
    columns queries), a query before the row's key. A column c of row i is kept from
    (transposed) i and up to min(i, T - 1) (else T - 1): a bound or two a half, against
    which each of the thread's columns is a compare with a constant (c and i in numba's
    64 bits took ~5 instructions a score)."""
    @cuda.jit(device=True, inline=True)
    def mask(s, row, first, col, T):
        for half in range(2):
            i = row + 8 * half
            low = int32(i - first - col)
            high = int32((T - 1 if transposed else min(i, T - 1)) - first - col)
            for j in range(N // 8):
                for e in range(2):
                    if int32(8 * j + e) > high or transposed and int32(8 * j + e) < low:
                        s[4 * j + 2 * half + e] = NEG_INF
    return mask


@cuda.jit(device=True, inline=True)
def low_word(smem, index, fields):
    """The low word of the wgmma descriptor of smem[index] with these fields: its start
    address field (the address >> 4) and the leading offset's."""
    return uint32(((shared_address(smem, index) >> 4) & 0x3FFF) | (fields & 0xFFFFFFFF))


@functools.cache
def products(D, M, N):
    """(scores, accumulate): the issuers of a warpgroup's two kinds of product, each one
    commit group, in blocks whose resident tiles are M rows and whose steps are N rows,
    the operands at element indices of smem:
      scores(s, smem, a, b)        s = a b^T over the head dim: a the warpgroup's 64 rows
                                   of a resident tile, b a step's rows (both K-major: rows
                                   of one panel of 64 columns of the head dim, in panels)
      accumulate(o, p, smem, r)    o += p r: p the bf16 A fragments over a step's rows, r
                                   those rows (MN-major: k the step's rows)
    Each descriptor is its low word plus the instruction's offset, summed in 32 bits (a
    start address plus an offset inside the shared memory never carries), joined to the
    constant high word of its fields (words_to_b64). Summed in 64 bits, as numba does,
    ptxas added and carried in register pairs and moved both words to uniform registers
    for every wgmma: half the instructions of session 19's backward passes were integer
    work."""
    panel_rows = N * PANEL
    (a_fields, _), (b_fields, _), (r_fields, r_step) = (
        wgmma_operand(64, PANEL, k_is_row=False), wgmma_operand(N, PANEL, k_is_row=False),
        wgmma_operand(N, D, k_is_row=True))
    a_high, b_high, r_high = (np.uint32(f >> 32) for f in (a_fields, b_fields, r_fields))
    over_d = wgmma_bf16_acc(N, False, False)
    over_step = wgmma_bf16_rs(D, True)
    s_fence, o_fence = warpgroup_fence(N // 2), warpgroup_fence(D // 2)

    @cuda.jit(device=True, inline=True)
    def scores(s, smem, a, b):
        a_low, b_low = low_word(smem, a, a_fields), low_word(smem, b, b_fields)
        s_fence(s)
        for kk in range(D // MMA_K):
            over_d(smem, words_to_b64(uint32(a_low + (kk // 4 * (M * PANEL * 2 // 16)
                                                      + kk % 4 * 2)), a_high),
                   words_to_b64(uint32(b_low + (kk // 4 * (panel_rows * 2 // 16) + kk % 4 * 2)),
                                b_high), s, uint32(kk > 0))
        warpgroup_commit()

    @cuda.jit(device=True, inline=True)
    def accumulate(o, p, smem, r):
        r_low = low_word(smem, r, r_fields)
        o_fence(o)
        for kk in range(N // MMA_K):
            over_step(smem, p[4 * kk], p[4 * kk + 1], p[4 * kk + 2], p[4 * kk + 3],
                      words_to_b64(uint32(r_low + kk * r_step), r_high), o)
        warpgroup_commit()

    return scores, accumulate


@functools.cache
def fold_product(D, M):
    """product(o, smem, a, r): o = a r, the dq of a step in the dk/dv pass that folds it
    (hopper_backward.BackwardTile.fold), one commit group: a a 64 x 64 tile (rows the k of
    the product: the warpgroup's keys; columns its m: the step's queries; MN-major, as the
    accumulators of dS^T are stored), r the warpgroup's 64 rows of the resident tile of M
    rows (k: MN-major, its D columns in panels). The first wgmma overwrites o."""
    (a_fields, a_step), (r_fields, r_step) = (wgmma_operand(64, 64, k_is_row=True),
                                              wgmma_operand(M, D, k_is_row=True))
    a_high, r_high = np.uint32(a_fields >> 32), np.uint32(r_fields >> 32)
    over_keys = wgmma_bf16_acc(D, True, True)
    fence = warpgroup_fence(D // 2)

    @cuda.jit(device=True, inline=True)
    def product(o, smem, a, r):
        a_low, r_low = low_word(smem, a, a_fields), low_word(smem, r, r_fields)
        fence(o)
        for kk in range(64 // MMA_K):
            over_keys(smem, words_to_b64(uint32(a_low + kk * a_step), a_high),
                      words_to_b64(uint32(r_low + kk * r_step), r_high), o, uint32(kk > 0))
        warpgroup_commit()

    return product


def head_matrix(x):
    """(matrix, (rb, rh, ch)) of a head array (B, H, T, D) that is a view of a 2-D matrix
    the bulk copies can read (tma_ready), with its heads one after another or side by side
    (the module's docstring); None for any other."""
    if x.size == 0 or x.strides[3] != 2:
        return None
    B, H, T, D = x.shape
    sb, sh, st, _ = x.strides
    if (H == 1 or sh == T * st) and (B == 1 or sb == H * T * st):
        shape, layout = (B * H * T, D), (H * T, T, 0)
    elif (H == 1 or sh == 2 * D) and (B == 1 or sb == T * st) and (T == 1 or st >= 2 * H * D):
        shape, layout = (B * T, H * D), (T, 0, D)
    else:
        return None
    if SIMULATOR:
        from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

        data = np.asarray(getattr(x, "_ary", x))
        matrix = FakeCUDAArray(np.lib.stride_tricks.as_strided(data, shape, (st, 2)))
    else:
        from numba.cuda.cudadrv import devicearray

        matrix = devicearray.DeviceNDArray(shape, (st, 2), x.dtype, gpu_data=x.gpu_data)
    if not tma_ready(matrix) or device_address(matrix) % 16:
        return None
    return matrix, tuple(np.int32(x) for x in layout)


def described_heads(name, x):
    described = head_matrix(x)
    if described is None:
        raise ValueError(f"{name}: heads of shape {tuple(x.shape)} strides "
                         f"{tuple(x.strides)} are no view of a matrix the bulk copies read "
                         "(head_matrix); flash.flash_attention_forward takes them")
    return described


def launch_pass(kernel, grid, threads, size, stream, args, matrices, whole):
    """kernel[grid, threads, stream, size](*args), its dynamic shared memory opted in once
    for the overload the arrays' layouts pick (matrices: the arrays whose "C" or "A"
    layout names it); whole (a producer warpgroup donating its registers by setmaxnreg,
    which only a whole-program compile honours): launched by the driver's JIT instead,
    which opts in by itself, once a signature."""
    layouts = (kernel, *(x.is_c_contiguous() for x in matrices))
    if whole:
        # imported by name: kernels.cache keys a kernel on every module its module imports,
        # and this launch (not the kernels' code) would tie the attention passes' to the
        # GEMMs'
        launch = importlib.import_module("..gemm.launch", __package__)
        launch.launch_by_driver(kernel, _signatures.setdefault(
            layouts, tuple(map(numba.typeof, args))), grid, 1, threads, size, stream, args,
            whole=True)
        return
    if layouts not in _opted_in and allow_dynamic_shared(kernel, tuple(map(numba.typeof, args)),
                                                         size):
        _opted_in.add(layouts)
    kernel[grid, threads, stream, size](*args)


_opted_in = set()      # (kernel, whether each array is C-contiguous) launched before
_signatures = {}       # the same keys: a driver launch's signature
