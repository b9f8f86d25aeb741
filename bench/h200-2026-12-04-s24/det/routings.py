"""--deterministic's routings that the det benchmarks time beside main's, as patches
(object, attribute, value): session 21's, whose ordered split-K went in turns on
tuning.persistent_tile's tile (ping-pong where the copier's splits fill one wave), and
session 22's add_parts (session 24's copy of session 22's file, with the latter)."""
import numpy as np
from numba import cuda

from microgpt.kernels.common import ceil_div
from microgpt.kernels.device import SMS
from microgpt.kernels.gemm import bf16 as gemm_bf16, tuning


def session21_ordered_tile(M, N, K):
    tile = tuning.persistent_tile(N)
    if tile == tuning.COPIER_TILE:
        tiles = ceil_div(M, tile.rows) * ceil_div(N, tile.cols)
        if tiles * tuning.default_split_k(M, N, K, tile) <= SMS:
            return tuning.PINGPONG_TILE
    return tile


SESSION21 = [(tuning, "ordered_tile", session21_ordered_tile),
             (tuning, "ordered_by_parts", lambda *args: False)]


# session 22's add_parts (gemm.turns until e571f41), for the by-parts products timed with it
# beside main's: a thread a column, a block a row of out, the splits' loads one after another
@cuda.jit
def _session22_add_parts_kernel(out, parts, splits, rows):
    M, N = out.shape
    c = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
    if c < N:
        for r in range(cuda.blockIdx.y, M, cuda.gridDim.y):
            total = out[r, c]
            for z in range(splits):
                total += parts[z * rows + r, c]
            out[r, c] = total


def session22_add_parts(out, parts, splits, stream=0):
    M, N = out.shape
    rows = parts.shape[0] // splits
    if M and N:
        _session22_add_parts_kernel[(ceil_div(N, 128), min(M, 65535)), 128, stream](
            out, parts, np.int32(splits), np.int32(rows))


SESSION22_ADD_PARTS = [(gemm_bf16, "add_parts", session22_add_parts)]


def by_parts_in(fewer):
    """Patches that give the ordered products by parts (their routed tile's splits in one
    wave: tuning.ordered_tile) fewer(fewest, default) splits instead of the default's:
    fewest the least whose chains fit (K / MAX_CHAIN), the parts' traffic through the L2
    and add_parts' reads shrinking with the splits."""
    default_split_k = tuning.default_split_k

    def split_k(M, N, K, tile, max_chain=tuning.MAX_CHAIN):
        split = default_split_k(M, N, K, tile, max_chain)
        if tile == tuning.ordered_tile(M, N, K) and tuning.ordered_by_parts(M, N, K, tile,
                                                                             split):
            return fewer(ceil_div(K, max_chain), split)
        return split
    return [(gemm_bf16, "default_split_k", split_k)]


FEWEST_SPLITS = by_parts_in(lambda fewest, split: fewest)
HALFWAY_SPLITS = by_parts_in(lambda fewest, split: (fewest + split) // 2)
