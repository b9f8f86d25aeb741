"""The bf16 GEMM's tuning policy for the H200: the named tiles and which a product takes,
and how far split-K splits it.

Accumulation: the tensor cores' float32 accumulation truncates where IEEE addition
rounds, so its error grows with K in proportion rather than as a random walk (measured on
the H200, 512 x 512 products of random bf16: 3.2e-6 relative at K 3072, 1.9e-5 at 16384,
5.8e-5 at 50304; cuBLAS 3.2e-6, 4.4e-6, 6.9e-6). No chain of mma accumulation runs
longer than MAX_CHAIN of K: split-K shortens the weight gradients' chains, and a product
that still has a longer one folds its mma accumulators into float32 ones by plain addition
every FOLD_STEPS slabs; except that with a wgmma tile a float32 out (the LM head's dX,
K = V) is zeroed and summed by split-K too, which keeps a full tile (folding needs a
second set of accumulators, and so a tile of half the width).

Split-K: the weight gradients (dW = X^T @ dY: K = B*T is long, M x N small) leave most of
the GPU idle with one block per output tile, so the launcher splits K over `split_k`
blocks per tile, each adding its partial sum into out with float32 atomics (accumulating
products only; the order of the additions then varies from run to run, by rounding).

"""
from numba import cuda

from ..common import ceil_div
from ..device import SIMULATOR, SMS
from ..layouts.tensor_maps import tma_ready
from .tiles import MmaTile, PersistentTile, WgmmaTile

MAX_CHAIN = 4096   # K summed by the tensor cores' truncating accumulation, at most
TALL_K = 2048      # the K from which a float32 out may take TALL_TILE on Hopper (default_tile)
# a TALL_TILE block's time over a WIDE_TILE block's on a long K: 1.38-1.47 over four
# andrea-120m products on the H200 (ms a wave of each, docs/gemm-bf16.md, row 13)
TALL_COST = 1.42
# whether the launcher routes products to the persistent kernel's copier tiles on Hopper
# (default_tile's `persistent`; their whole-program load: docs/gemm-bf16.md, session 20)
PERSISTENT_ROUTING = True
# an item's epilogue on the persistent copier tiles, adding its float32 tile into out, in
# the time of its slabs of K (split_slabs): on the H200 ~5 (session 21, call C: the MLP dW
# at andrea-120m, 3 waves of 52 slabs an item, 0.1202 ms; W_O's, a wave of 37, 0.0309)
EPILOGUE_SLABS = 5


# Chosen by the sweep of tools/bench.py --gemm-sweep on the H200 (docs/gemm-bf16.md):
# 128 x 128 out per block in 4 warps of 64 x 64 (64 mma per slab per warp, for 16
# fragment loads), 32-deep slabs in 3 stages: 48 KiB
LARGE_TILE = MmaTile(128, 128, 32, 64, 64, 3)
# 64 x 64 in 4 warps of 32 x 32: four times the blocks, for outputs too small to fill the
# GPU with large ones, and for a short K (a block's fixed costs weigh more there)
SMALL_TILE = MmaTile(64, 64, 32, 32, 32, 4)
# 128 x 128 in 8 warps of 64 x 32: half the accumulators per thread of LARGE_TILE, which
# leaves registers for a second set when a long K is folded (see MAX_CHAIN)
LEAN_TILE = MmaTile(128, 128, 32, 64, 32, 3)


# wgmma (sm_90a): two warpgroups of m64n256, 128 x 256 out per block (128 accumulators
# per thread), 64-deep slabs in 4 stages: 193 KiB of shared memory, one block per SM
WIDE_TILE = WgmmaTile(128, 256, 64, 4, 2)
# 128 x 128: half the accumulators, which leaves registers for a second set when a long K
# is folded into a bf16 out (see MAX_CHAIN; a float32 one is split)
FOLD_TILE = WgmmaTile(128, 128, 64, 4, 2)
# three warpgroups, 192 x 256 (168 registers a thread, 4 stages in 225 KiB): half as many
# rows again per byte of b copied, for the products long enough in K that the slabs'
# traffic, not the fill and the epilogue, sets their pace (default_tile)
TALL_TILE = WgmmaTile(192, 256, 64, 4, 3)
# the persistent kernel's (gemm.persistent): the wide tile's block, one an SM walking the
# tiles, the ring running on into the next tile during the epilogue (192 KiB of stages and
# 32 KiB of the epilogue's buffers)
PERSISTENT_TILE = PersistentTile(128, 256, 64, 4, 2)
# and in clusters of two blocks on tiles down one column, which share their slabs of b:
# each copies half of b's (multicast), a third less of the L2's traffic a FLOP
CLUSTER_TILE = PersistentTile(128, 256, 64, 4, 2, 2)
# with a copying warpgroup of its own (CUTLASS's and cuBLAS's block: 384 threads), whose
# registers the computing warpgroups take (setmaxnreg, under the driver's whole-program JIT)
COPIER_TILE = PersistentTile(128, 256, 64, 4, 2, copier=True)
# and the copier's two computing warpgroups in ping-pong, each on a 128 x 128 tile of its
# own (two m64n128 a k-step, 128 accumulators), one's epilogue under the other's main
# loop; 32 KiB stages, 6 of them
PINGPONG_TILE = PersistentTile(128, 128, 64, 6, 2, copier=True, pingpong=True)
# the copier's block on 128 x 192 tiles (96 accumulators a thread): for outs of N 384,
# which the 256-wide tile covers a quarter empty (persistent_tile)
NARROW_COPIER_TILE = PersistentTile(128, 192, 64, 4, 2, copier=True)


def wgmma_available():
    """wgmma and the bulk tensor copies are sm_90a's: a device of compute capability 9.x
    (the simulator runs their twins, but only where a test names a wgmma tile)."""
    return not SIMULATOR and cuda.get_current_device().compute_capability[0] == 9


def wgmma_takes(*matrices):
    """Whether the default tile of a product of these matrices is a wgmma one: on sm_90a,
    with matrices the bulk tensor copies can move (layouts.tensor_maps.tma_ready)."""
    return wgmma_available() and all(map(tma_ready, matrices))


def default_tile(M, N, K, accumulate=False, wgmma=False, bf16_out=False, persistent=False):
    """With wgmma (a Hopper GPU, and matrices the bulk tensor copies can move) and
    `persistent` (the product needs none of what the persistent kernel lacks: the GELU
    backward's epilogue, folding a bf16 out, a staged bias; ordered split-K takes
    ordered_tile's), the persistent kernel's copier tiles: persistent_tile's, and where
    that is ping-pong the narrow copier (128 x 192, which covers N 384 whole), as for a
    split-K product whose waves of items take it fewer slabs' time (split_slabs). On the H200
    (docs/gemm-bf16.md, tuning log rows 21 and 23; session 21, calls B and C, each product
    captured beside cuBLAS in one process) the narrow copier was faster than ping-pong on
    every one of andrea-12m's nine products of N 384: QKV dX 0.0315 -> 0.0288 ms, MLP up
    dX 0.0395 -> 0.0347, MLP down forward 0.0396 -> 0.0341, MLP down dW 0.0409 -> 0.0322,
    the LM head's dX 0.0647 -> 0.0398 and dW 0.0510 -> 0.0393 (8192-row chunks), W_O's
    three by 2-10% (call C). Split-K by split_slabs (session 22, call B, probe.py sweep dw,
    each weight gradient's splits of both tiles captured beside cuBLAS): the narrow copier
    for andrea-120m's MLP dW (4 splits, 384 items: 0.1131 -> 0.1092 ms up, 0.1152 -> 0.1106
    down, from the copier's 5, 360) and andrea-12m's QKV dW (7 splits: 0.0302 -> 0.0250), the
    copier kept where it won or tied (QKV dW at andrea-120m 0.0868 against 0.0869, andrea-12m's
    MLP up dW 0.0313 against 0.0315). Else with wgmma the wide wgmma tile, or for a K too
    long for one chain that cannot be split (a bf16 out: a float32 one is split, see
    splits_written) the folding one. Otherwise the mma.sync tiles: the large tile for
    products with a K of at least 768 and either many output tiles or a long K to split
    (the weight gradients); the small one otherwise; the lean one to fold.

    On Hopper a float32 out (written, accumulated or split) of K at least TALL_K takes the
    tall tile where its waves of blocks, each TALL_COST times a wide block's time, take
    no longer than the wide tile's waves (each tile with its own split). On the H200
    (docs/gemm-bf16.md, tuning log row 13) it took the LM head's dX and dW 2.206 -> 2.080
    and 2.138 -> 1.967 ms, the MLP's dW 0.127 -> 0.119, and lost where K is 768 (the LM
    head forward 2.264 -> 2.422: the fill and the epilogue weigh more there) and on W_O's
    dW (768 x 768: 12 tall tiles split 11 ways fill one wave, as 18 wide ones in 7 do)."""
    folds = K > MAX_CHAIN and not accumulate
    if wgmma:
        if folds and bf16_out:
            return FOLD_TILE
        if persistent:
            # (ping-pong's products: the narrow copier, faster on each of them, below)
            tile = persistent_tile(N)
            if tile == PINGPONG_TILE or accumulate and (
                    split_slabs(M, N, K, NARROW_COPIER_TILE) < split_slabs(M, N, K, tile)):
                return NARROW_COPIER_TILE
            return tile
        if bf16_out or K < TALL_K:
            return WIDE_TILE
        split = accumulate or folds        # (a float32 out of a long K is split too)
        tall, wide = (waves(M, N, K, tile, split) for tile in (TALL_TILE, WIDE_TILE))
        return TALL_TILE if TALL_COST * tall <= wide else WIDE_TILE
    if folds:
        return LEAN_TILE
    tiles = ceil_div(M, LARGE_TILE.rows) * ceil_div(N, LARGE_TILE.cols)
    return LARGE_TILE if K >= 768 and (tiles >= 4 * SMS or K >= 8192) else SMALL_TILE


def persistent_tile(N):
    """The copier tile (128 x 256, cooperative), or the ping-pong one (128 x 128 a
    warpgroup) where the wide tile's 256 columns would leave more than an eighth of its
    last column of tiles empty (andrea-12m's products of N 384; default_tile then takes the
    narrow copier, the ordered split-K ping-pong: ordered_tile). On the H200 (docs/gemm-bf16.md, tuning log row 19; every step product
    captured beside the default wgmma tiles and cuBLAS in one call) the copier took
    andrea-120m's fifteen from 0.879x cuBLAS (geometric mean) to 0.973x, faster on fourteen
    and level on the LM head dW (2.013 against 2.007 ms), and andrea-12m's from 0.794x to
    0.954x; ping-pong was faster still on eight of andrea-12m's nine products of N 384 (W_O
    dX 0.0131 -> 0.0122 ms, QKV dX 0.0352 -> 0.0314), slower on its MLP down dW (0.0397
    against 0.0380) and on every product of N 768 or more."""
    wide, narrow = (ceil_div(N, cols) * cols for cols in (COPIER_TILE.cols,
                                                           PINGPONG_TILE.cols))
    return PINGPONG_TILE if 8 * wide > 9 * narrow else COPIER_TILE


def ordered_tile(M, N, K):
    """The tile of a product whose split-K adds its parts in order on Hopper
    (--deterministic: a weight gradient, or a float32 out of a K longer than one chain).
    Where the atomic split-K's own tile (default_tile's; the narrow copier where it covers
    N whole and the copier does not) takes its splits in one wave, that tile, whose splits
    then go by parts (ordered_by_parts: in turns every split of a tile would wait for the
    ones before it, all ending together); otherwise persistent_tile's, in turns (the
    persistent kernel's "ordered" epilogue), where a split mostly finds its turn come.

    On the H200 (session 22, call B, bench/h200-2026-12-03-s22/det/ordered_sweep.py; ms,
    captured; the atomics' / in turns, as session 21 routed it / by parts on this tile):
    andrea-12m W_O dW 0.0136 / 0.0488 / 0.0186 (narrow copier, 16 splits), MLP up 0.0320
    / 0.0491 / 0.0409 (copier, 7), MLP down 0.0319 / 0.0492 / 0.0406 (narrow, 5), QKV
    0.0307 / 0.0480 / 0.0332 (narrow, 7; the copier's 8 splits by parts 0.0400), the LM
    head dW of an 8192-row chunk 0.0389 / 0.0538 / 0.0526 (narrow, 2). andrea-120m W_O dW 0.0350 / 0.0511 / 0.0440 (copier, 7); its QKV and MLP dW (two
    or three waves) in turns, by parts 13-19% slower (QKV 0.1004 against 0.1130)."""
    tile = default_tile(M, N, K, True, True, False, True)
    if N % COPIER_TILE.cols and not N % NARROW_COPIER_TILE.cols:
        tile = NARROW_COPIER_TILE
    if ordered_by_parts(M, N, K, tile, default_split_k(M, N, K, tile)):
        return tile
    return persistent_tile(N)


def ordered_by_parts(M, N, K, tile, splits):
    """Whether a persistent tile's ordered split-K writes its splits' parts into a
    workspace kept with out and adds them after (gemm.turns.add_parts), instead of adding
    them in turns: where a tile's splits all run in one wave (ordered_tile)."""
    tiles = ceil_div(M, tile.rows) * ceil_div(N, tile.cols)
    return tiles * splits <= SMS


def split_slabs(M, N, K, tile):
    """A split-K product's time on a persistent tile in its default split, in slabs of
    the copier's 128 x 256: waves of items (one an SM), each its slabs of K and its
    epilogue's adds (EPILOGUE_SLABS), a slab of a smaller tile in proportion to its area."""
    split = default_split_k(M, N, K, tile)
    steps = ceil_div(ceil_div(K, tile.depth), split)
    items = ceil_div(M, tile.rows) * ceil_div(N, tile.cols) * split
    area = tile.rows * tile.cols / (COPIER_TILE.rows * COPIER_TILE.cols)
    return ceil_div(items, SMS) * (steps + EPILOGUE_SLABS) * area


def waves(M, N, K, tile, split):
    """Waves of one block an SM that a product's blocks take with a wgmma tile, split-K's
    default split or none."""
    blocks = ceil_div(M, tile.rows) * ceil_div(N, tile.cols)
    return ceil_div(blocks * (default_split_k(M, N, K, tile) if split else 1), SMS)


def splits_written(K, accumulate, bf16_out, tile, max_chain=MAX_CHAIN):
    """Whether a product that writes its float32 out with a wgmma tile and a K longer than
    one chain zeroes out and accumulates split-K's sums into it instead of folding,
    keeping a full tile: on the H200 the LM head's dX at andrea-120m (16384 x 768,
    K 50304) took 2.13 ms so with the wide tile, 2.83 with the folding one (docs/gemm-bf16.md,
    tuning log row 11), and 2.08 with the tall one (row 13)."""
    return (isinstance(tile, (WgmmaTile, PersistentTile)) and not accumulate and not bf16_out
            and K > max_chain)


def default_split_k(M, N, K, tile, max_chain=MAX_CHAIN):
    """Blocks per output tile along K, each still with at least 16 slabs to pipeline, and
    enough that none sums more than max_chain of K. A wgmma tile takes a whole SM: as many
    as fill the SMs in one wave without starting a second; the small mma.sync tile about
    four per SM (what fits at once).

    Where a wgmma tile's blocks take more than one wave, a last wave mostly idle costs
    about a whole one: up to twice the splits (each block's share of K shorter) are taken
    for a last wave at least 7/8 full. On the H200 the MLP weight gradients at andrea-120m
    (72 tiles) took 0.1527 ms in 4 splits (288 blocks, 2.2 waves) and 0.1264 in 5 (2.7);
    QKV's (54 tiles) 0.1007 in 4 and 0.0986 in 7 (docs/gemm-bf16.md, tuning log row 12)."""
    tiles = ceil_div(M, tile.rows) * ceil_div(N, tile.cols)
    steps = ceil_div(K, tile.depth)
    whole_sm = isinstance(tile, (WgmmaTile, PersistentTile))
    fill = SMS // tiles if whole_sm else ceil_div(4 * SMS, tiles)
    split = max(1, min(fill, steps // 16), ceil_div(K, max_chain))
    if whole_sm and tiles * split > SMS:
        for more in range(split, min(2 * split, steps // 16) + 1):
            if 8 * tiles * more >= 7 * SMS * ceil_div(tiles * more, SMS):
                return more
    return split
