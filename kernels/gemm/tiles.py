"""The bf16 GEMM's tiles: what a block of each tensor-core kernel owns, and what it writes.

An MmaTile is a block of the mma.sync kernel (``gemm.mma_sync``), a WgmmaTile one of the
wgmma kernel (``gemm.wgmma``); check_tile holds either to what its kernel can run. The
epilogue, what happens to each float32 result, is one of EPILOGUES (``gemm.bf16``).
"""
from typing import NamedTuple

from ..device import DYNAMIC_SHARED_LIMIT, MMA_K, MMA_M, SWIZZLE_BYTES, WARPGROUP, check_block

EPILOGUES = ("float32", "bf16", "accumulate", "atomic", "ordered", "gelu", "gelu_backward")
BF16_OUT = ("bf16", "gelu", "gelu_backward")
GROUP = 8     # tiles of out down a column that consecutive blocks take (block_tile)
FOLD_STEPS = 4     # slabs between folds of the mma accumulators, when folding


class MmaTile(NamedTuple):
    """A block's rows x cols of out, marched over K in steps of depth through `stages`
    shared buffers; each warp owns warp_rows x warp_cols of it. min_blocks > 1 caps the
    registers so that many blocks fit on an SM at once (CUDA's launch bounds)."""
    rows: int
    cols: int
    depth: int
    warp_rows: int
    warp_cols: int
    stages: int
    min_blocks: int = 1

    @property
    def threads(self):
        return (self.rows // self.warp_rows) * (self.cols // self.warp_cols) * 32

    @property
    def shared_bytes(self):
        return self.stages * (self.rows + self.cols) * self.depth * 2


class WgmmaTile(NamedTuple):
    """A block's rows x cols of out, in `warpgroups` of 128 threads that each own 64 rows
    and all the columns (one wgmma m64n{cols}k16 per 16 of k), marched over K in steps of
    depth through `stages` buffers of dynamic shared memory."""
    rows: int
    cols: int
    depth: int
    stages: int
    warpgroups: int

    @property
    def threads(self):
        return WARPGROUP * self.warpgroups

    @property
    def stage_elements(self):
        """bf16 elements from one stage's start to the next: the a slab, then the b slab,
        rounded up so that every slab starts on a swizzle pattern."""
        return -(-(self.rows + self.cols) * self.depth // (SWIZZLE_BYTES // 2)) * (
            SWIZZLE_BYTES // 2)

    @property
    def shared_bytes(self):
        # the stages, or the epilogue's float32 tile where that is more; and room to align
        # the start, which the launch does not promise beyond 16 bytes
        return (max(self.stages * self.stage_elements * 2, 4 * self.rows * self.cols)
                + SWIZZLE_BYTES)


class PersistentTile(NamedTuple):
    """A tile of the persistent wgmma kernel (``gemm.persistent``): as a WgmmaTile's, but
    one block an SM walks the output's tiles, the stages' ring running on from one tile
    into the next, and each warpgroup writes out its 64 x cols through two buffers of its
    own (box_bytes each, one box of out at a time) while the next tile's slabs land.
    cluster > 1: blocks in clusters of that many on tiles down one column of out, which
    copy a part of their common slabs of b each, into all of their stages (multicast).
    copier: a warpgroup of its own beside the `warpgroups` computing ones issues the copies
    (its first thread), its registers handed to them (setmaxnreg: the kernel is loaded
    whole-program, by the driver's JIT). pingpong (with a copier, two computing
    warpgroups): each computing warpgroup has every other tile of the block's, all of its
    `rows` (64 or 128), taking turns at the tensor cores: one's epilogue under the other's
    main loop."""
    rows: int
    cols: int
    depth: int
    stages: int
    warpgroups: int
    cluster: int = 1
    copier: bool = False
    pingpong: bool = False

    @property
    def threads(self):
        return WARPGROUP * (self.warpgroups + self.copier)

    stage_elements = WgmmaTile.stage_elements

    @property
    def box_bytes(self):
        """A box of the epilogue: 64 rows of up to 128 bytes (32 float32 or 64 bf16)."""
        return 64 * min(4 * self.cols, 128)

    @property
    def shared_bytes(self):
        return (self.stages * self.stage_elements * 2 + 2 * self.warpgroups * self.box_bytes
                + SWIZZLE_BYTES)


def check_wgmma_tile(tile):
    rows, cols, depth, stages, warpgroups = tile[:5]
    if getattr(tile, "pingpong", False):
        if not tile.copier or tile.cluster != 1 or warpgroups != 2 or rows not in (64, 128):
            raise ValueError(f"tile {tile}: a ping-pong tile takes a copier, two computing "
                             "warpgroups, no cluster, and 64 or 128 rows (each warpgroup's)")
        if rows // 64 * cols // 2 > 128:
            raise ValueError(f"tile {tile}: a ping-pong warpgroup holds at most 128 "
                             "accumulators a thread (rows / 64 x cols / 2)")
    elif min(rows, cols, depth, stages, warpgroups) < 1 or rows != 64 * warpgroups:
        raise ValueError(f"tile {tile}: rows must be 64 per warpgroup")
    if not (cols in (16, 32) or (cols % 64 == 0 and cols <= 256)):
        raise ValueError(f"tile {tile}: cols must be 16, 32, or a multiple of 64 up to 256 "
                         "(the wgmma n, and whole 128-byte swizzle panels)")
    if depth not in (16, 32, 64):
        raise ValueError(f"tile {tile}: depth must be 16, 32 or 64 (a swizzled row)")
    if stages < 3:
        raise ValueError(f"tile {tile}: the pipeline needs at least 3 stages (one slab "
                         "landing while the tensor cores work on two)")
    check_block(f"tile {tile}", tile.threads, tile.shared_bytes, DYNAMIC_SHARED_LIMIT)


def check_tile(tile):
    if isinstance(tile, PersistentTile) and tile.cluster not in (1, 2, 4):
        raise ValueError(f"tile {tile}: clusters of 1, 2 or 4 blocks")
    if isinstance(tile, (WgmmaTile, PersistentTile)):
        return check_wgmma_tile(tile)
    rows, cols, depth, warp_rows, warp_cols, stages, _ = tile
    if min(tile) < 1 or rows % warp_rows or cols % warp_cols:
        raise ValueError(f"tile {tile}: rows and cols must be positive multiples of "
                         "warp_rows and warp_cols")
    if warp_rows % MMA_M or warp_cols % 16 or depth % MMA_K:
        raise ValueError(f"tile {tile}: warp_rows, warp_cols and depth must be multiples "
                         "of 16 (the mma and ldmatrix shapes)")
    if depth & (depth - 1):
        raise ValueError(f"tile {tile}: depth must be a power of two (the swizzled slabs)")
    if stages < 2:
        raise ValueError(f"tile {tile}: the pipeline needs at least 2 stages")
    check_block(f"tile {tile}", tile.threads, tile.shared_bytes)
