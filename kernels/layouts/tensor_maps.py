"""Tensor maps: how the bulk tensor copies (TMA, sm_90) see a matrix in global memory.

A tensor map describes a row-major matrix and the box that one copy moves; the box lies in
shared memory in the swizzled layout of ``layouts.tiles``. The driver encodes it, once per
matrix and box while the matrix's memory lives.
"""
import numpy as np
from numba import cuda

from ..common import device_address, kept_with
from ..device import SIMULATOR


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
    chunks are XOR-swizzled as `swizzled` lays out bf16 tiles (a box of one row: any
    multiple of 16 bytes up to 256 elements, unswizzled); zeros are read past the
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
    # a box of one row (a run of float32 statistics) is the same in any swizzle: none,
    # which takes rows wider than 128 bytes
    swizzle = cu.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_NONE if box_rows == 1 else {
        32: cu.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_32B,
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
