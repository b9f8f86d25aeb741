"""bf16 GEMM on the tensor cores: out (M, N) = op(a) @ op(b), float32 accumulation.

NumPy twin: ``microgpt.reference.matmul_forward`` on the same bf16-rounded operands (the
float32 family of ``gemm`` is the other twin, and the ``--precision fp32`` path). The
operands are bf16 matrices held in uint16 device arrays (``ml_dtypes.bfloat16`` on the
host, viewed as uint16). The epilogue, what happens to each float32 result, is one of
EPILOGUES: written as float32, written as bf16 (an activation that feeds the next
matmul), or added into a float32 out (a weight gradient; "atomic" when split-K, or
"ordered", the same bits every run: ``gemm.turns``); or the
MLP's GELU around it (the wgmma kernel's; "gelu" the persistent kernel's too): "gelu"
writes the product (the pre-activation, which the backward reads) to `pre` and gelu of it
to out, "gelu_backward" writes the product times gelu' of `pre`. These fold the two GELU
kernels of ``elementwise`` into the GEMMs around them, a pass over the (B*T, 4C)
activations fewer each way; the model's ops take them where ``gemm.GELU_FORWARD_IN_EPILOGUE``
and ``gemm.GELU_BACKWARD_IN_EPILOGUE`` say. Transposes and the epilogue are compile-time
constants of one kernel body.

This module routes a product to a kernel: the wgmma one (``gemm.wgmma``) on Hopper with
matrices the bulk tensor copies can move, the mma.sync one (``gemm.mma_sync``) otherwise,
with the tile and split-K that ``gemm.tuning`` chooses, unless the call names its own.
"""
import numpy as np
from numba import cuda

from ..common import ceil_div, check_array, device_address, fill_zero, kept_with
from ..device import CHUNK, SIMULATOR, allow_dynamic_shared
from ..layouts.tensor_maps import tensor_map, tma_ready
from ..layouts.tiles import PANEL
from . import launch, persistent, wgmma
from .bias import check_bias, unread_bias
from .mma_sync import mma_sync_kernel
from .tiles import GROUP, MmaTile, PersistentTile, WgmmaTile, check_tile
from . import tuning
from .tuning import MAX_CHAIN, default_split_k, default_tile, splits_written, wgmma_takes
from .turns import add_parts, beside, join, split_turns
from .wgmma import wgmma_kernel


def _kernel(transpose_a, transpose_b, epilogue, aligned, fold, tile, biased):
    if isinstance(tile, WgmmaTile):     # the bulk tensor copy needs aligned rows
        return wgmma_kernel(transpose_a, transpose_b, epilogue, fold, tile, biased)
    return mma_sync_kernel(transpose_a, transpose_b, epilogue, aligned, fold, tile, biased)


# ----------------------------------------------------------------------------------
# launcher

def matmul_bf16(out, a, b, transpose_a=False, transpose_b=False, accumulate=False,
                bias=None, *, gelu=None, pre=None, tile=None, split_k=None,
                deterministic=False, max_chain=MAX_CHAIN, stream=0):
    """out (M, N) = op(a) @ op(b) (+ bias (N,) float32 on every row, in the epilogue), op
    transposing when asked; += when accumulate (then without a bias).

    a is (M, K), or (K, M) when transpose_a; b is (K, N), or (N, K) when transpose_b; both
    bf16 in uint16 device arrays, each a matrix of its own or a view of some of a wider
    one's columns (its rows then lie further apart). out is float32, or bf16 (uint16,
    written only), C-contiguous.
    gelu="forward": pre (M, N) = op(a) @ op(b) (+ bias) and out = gelu(pre); gelu="backward":
    out = (op(a) @ op(b)) * gelu'(pre); out and pre bf16 (the MLP's GELU, see EPILOGUES: in
    the wgmma kernel's epilogue, so a wgmma tile, given or the default, and K > 0).
    tile (a WgmmaTile, or an MmaTile for the mma.sync kernel) and split_k (blocks along K,
    accumulating products only) override the shape-based defaults; deterministic: the
    splits add their parts in the order of their index (gemm.turns), so the same inputs
    give the same bits every run, where by default they add them by float atomics in the
    order they finish (a rounding apart from run to run); max_chain (the most K
    the tensor cores sum in one chain: a longer K is split, or folded into float32) is
    there for the tests."""
    for name, arr in (("out", out), ("a", a), ("b", b)):
        if len(arr.shape) != 2:
            raise ValueError(f"{name}: expected a 2-D matrix, got shape {tuple(arr.shape)}")
    M, N = out.shape
    K = a.shape[0] if transpose_a else a.shape[1]
    out_bf16 = out.dtype == np.uint16
    if out_bf16 and accumulate:
        raise ValueError("out: a bf16 output is written, never accumulated into "
                         "(accumulate into a float32 array)")
    check_array("out", out, (M, N), np.uint16 if out_bf16 else np.float32)
    check_array("a", a, (K, M) if transpose_a else (M, K), np.uint16, strided=True)
    check_array("b", b, (N, K) if transpose_b else (K, N), np.uint16, strided=True)
    for name, arr in (("a", a), ("b", b)):
        if arr.size and arr.strides[1] != 2:
            raise ValueError(f"{name}: a row's elements must be adjacent (a matrix, or a view "
                             f"of some of a wider one's columns), got strides "
                             f"{tuple(arr.strides)}")
    check_bias(bias, N, accumulate)
    if bias is not None and gelu == "backward":
        raise ValueError("bias: the GELU backward's product has none (a bias's gradient "
                         "is reductions.bias_backward's)")
    if gelu not in (None, "forward", "backward"):
        raise ValueError(f"gelu={gelu!r}: must be None, 'forward' or 'backward'")
    if gelu is not None:
        if not out_bf16 or accumulate:
            raise ValueError("gelu: the GELU epilogues write a bf16 out (not float32, not "
                             "accumulated)")
        if pre is None:
            raise ValueError(f"gelu={gelu!r} needs pre, the pre-activation (M, N) bf16 array")
        check_array("pre", pre, (M, N), np.uint16)
    elif pre is not None:
        raise ValueError("pre: only the GELU epilogues take it (give gelu='forward' or "
                         "'backward')")
    gelu_pre, pre = pre, out if pre is None else pre     # (the wgmma kernel's unread stand-in)
    if deterministic and accumulate:    # an add_parts beside may still add into out, or
        join(stream)                    # read the workspace this product writes
    if tile is None:
        # the persistent tiles do not fold a bf16 out, nor have the GELU backward's
        # epilogue (docs/gemm-bf16.md, row 24); they read a bias from global memory in the
        # epilogue, where the wgmma kernel stages it in shared memory first
        # (docs/kernels-step.md, row 4: ~3 us a tile so); ordered split-K takes
        # tuning.ordered_tile's
        ordered = deterministic and (accumulate or K > max_chain)
        persistent = (tuning.PERSISTENT_ROUTING and bias is None and gelu != "backward"
                      and not (out_bf16 and K > max_chain))
        hopper = wgmma_takes(out, pre, a, b)
        # (a split_k given keeps the wgmma kernel's tiles, which fold a split longer than
        # a chain)
        tile = (tuning.ordered_tile(M, N, K) if hopper and persistent and ordered
                and split_k is None
                else default_tile(M, N, K, accumulate, hopper, out_bf16,
                                  persistent and not ordered))
    elif not isinstance(tile, (WgmmaTile, PersistentTile)):
        tile = MmaTile(*tile)
    check_tile(tile)
    bulk = isinstance(tile, (WgmmaTile, PersistentTile))    # the bulk tensor copies' tiles
    if bulk and not all(map(tma_ready, (out, pre, a, b))):
        raise ValueError(f"tile {tile}: the bulk tensor copies need matrices whose rows are "
                         "whole 16-byte chunks (a multiple of 8 bf16 or 4 float32 columns) "
                         "starting 16-byte aligned; give an MmaTile, or none, for these")
    if split_k is not None and (split_k < 1 or (split_k > 1 and not accumulate)):
        raise ValueError(f"split_k={split_k}: must be 1, or more when accumulating")
    if M == 0 or N == 0:
        return
    if gelu is not None and (not isinstance(tile, (WgmmaTile, PersistentTile)) or K == 0):
        # the mma.sync kernel stores from registers in a loop that must unroll, and GELU in
        # it kept the loop from unrolling (the accumulators went to local memory)
        raise ValueError(f"gelu={gelu!r}: the GELU epilogues are the wgmma and persistent "
                         f"kernels', for a K of at least 1 (here tile {tuple(tile)}, K {K}); "
                         "run the product and then elementwise's GELU kernel, as "
                         "gemm.matmul_gelu_* do")
    if K == 0:          # a sum of nothing, and no step for a kernel's pipeline to start on
        if not accumulate:
            fill_zero(out, stream)
        return
    if split_k is None and splits_written(K, accumulate, out_bf16, tile, max_chain):
        fill_zero(out, stream)
        accumulate = True
    if split_k is None:
        split_k = default_split_k(M, N, K, tile, max_chain) if accumulate else 1
    steps_per_split = ceil_div(ceil_div(K, tile.depth), split_k)
    split_k = ceil_div(ceil_div(K, tile.depth), steps_per_split) if K else 1
    epilogue = ("gelu" if gelu == "forward" else "gelu_backward" if gelu == "backward"
                else ("ordered" if deterministic else "atomic") if split_k > 1
                else "accumulate" if accumulate
                else "bf16" if out_bf16 else "float32")
    aligned = all(arr.shape[1] % CHUNK == 0 and arr.strides[0] % 16 == 0
                  and device_address(arr) % 16 == 0 for arr in (a, b))
    fold = steps_per_split * tile.depth > max_chain
    if isinstance(tile, PersistentTile):
        if fold:
            raise ValueError(f"tile {tile}: a persistent tile sums a split in one chain of at "
                             f"most max_chain {max_chain} of K (here {steps_per_split} slabs "
                             f"of {tile.depth}): give split_k at least "
                             f"{ceil_div(K, max_chain)}, or none")
        if epilogue == "ordered" and tuning.ordered_by_parts(M, N, K, tile, split_k):
            return _add_by_parts(out, a, b, transpose_a, transpose_b, tile, split_k,
                                 steps_per_split, stream)
        return _launch_persistent(out, gelu_pre, a, b, bias, transpose_a, transpose_b,
                                  epilogue, tile, split_k, steps_per_split, stream)
    kernel = _kernel(bool(transpose_a), bool(transpose_b), epilogue, aligned, fold, tile,
                     bias is not None)
    bias = unread_bias(out) if bias is None else bias
    units = ceil_div(M, tile.rows) * ceil_div(N, tile.cols) * (
        tile.warpgroups if isinstance(tile, WgmmaTile) else 1)
    turns = split_turns(out, units if epilogue == "ordered" else 1)
    layouts = tuple("C" if arr.is_c_contiguous() else "A" for arr in (a, b))
    # an int32, as the kernels' signature says: the launch then runs the overload compiled for it
    # (a Python int would compile another, for int64, without the shared-memory opt-in)
    steps_per_split = np.int32(steps_per_split)
    if isinstance(tile, WgmmaTile):
        rows, cols, depth = tile.rows, tile.cols, tile.depth
        a_map = tensor_map(a, *((depth, min(rows, PANEL)) if transpose_a else (rows, depth)))
        b_map = tensor_map(b, *((cols, depth) if transpose_b else (depth, min(cols, PANEL))))
        out_map, pre_map = (tensor_map(arr, 64, min(cols, 64 if out_bf16 else 32))
                            for arr in (out, pre))
        tiles_n, groups_m = ceil_div(N, cols), ceil_div(M, GROUP * rows)
        grid = ((GROUP * tiles_n, groups_m, split_k) if epilogue == "ordered"
                else (GROUP * split_k, tiles_n, groups_m))
        allow_dynamic_shared(kernel, wgmma.signature(epilogue, *layouts),
                             tile.shared_bytes)
        kernel[grid, tile.threads, stream, tile.shared_bytes](
            out, pre, a, b, bias, turns, a_map, b_map, out_map, pre_map, steps_per_split)
    else:
        grid = (ceil_div(N, tile.cols), ceil_div(M, tile.rows), split_k)
        kernel[grid, tile.threads, stream](out, a, b, bias, turns, steps_per_split)


def _add_by_parts(out, a, b, transpose_a, transpose_b, tile, splits, steps_per_split, stream):
    """The ordered split-K without its waits: each split's part into rows of its own of a
    float32 workspace kept with out (the "parts" epilogue), then turns.add_parts adds them
    into out in the splits' order, the ordered epilogue's sums bit for bit, beside the
    stream (turns.beside: the launches after this product need not wait for it)."""
    M, N = out.shape
    rows = ceil_div(ceil_div(M, tile.rows), tile.cluster) * tile.cluster * tile.rows
    parts = kept_with(out, ("split parts", splits, rows, N),
                      lambda: cuda.device_array((splits * rows, N), np.float32))
    _launch_persistent(parts, None, a, b, None, transpose_a, transpose_b, "parts", tile,
                       splits, steps_per_split, stream, M)
    beside(lambda side: add_parts(out, parts, splits, side), stream)


def _launch_persistent(out, pre, a, b, bias, transpose_a, transpose_b, epilogue, tile, splits,
                       steps_per_split, stream, M=None):
    """gemm.persistent's launch: one block an SM (or a tile) walking out's tiles; in
    clusters, through the driver's launch with a cluster shape (numba-cuda has none). pre:
    the "gelu" epilogue's, else None; M: the product's rows where out is the "parts"
    epilogue's workspace (its splits' parts one below the other)."""
    M, N = (out.shape[0] if M is None else M), out.shape[1]
    rows, cols, depth, cluster = tile.rows, tile.cols, tile.depth, tile.cluster
    kernel = persistent.persistent_kernel(bool(transpose_a), bool(transpose_b), epilogue,
                                          tile, bias is not None)
    bias = unread_bias(out) if bias is None else bias
    tiles_m, tiles_n = ceil_div(M, rows), ceil_div(N, cols)
    # the ordered epilogue's units: each warpgroup's rows of a tile (a ping-pong tile: one
    # warpgroup's)
    turn_units = ceil_div(tiles_m, cluster) * cluster * tiles_n * (
        1 if tile.pingpong else tile.warpgroups)
    turns = split_turns(out, turn_units if epilogue == "ordered" else 1)
    layouts = tuple("C" if arr.is_c_contiguous() else "A" for arr in (a, b))
    a_map = tensor_map(a, *((depth, min(rows, PANEL)) if transpose_a else (rows, depth)))
    # a block of a cluster copies its part of b's slab: rows of it, when b is (N, K)
    b_map = tensor_map(b, *((cols // cluster, depth) if transpose_b
                            else (depth, min(cols, PANEL))))
    out_map = tensor_map(out, 64, min(cols, 64 if out.dtype == np.uint16 else 32))
    if pre is None:                    # unread: a stand-in kept with out's allocation
        pre, pre_map = kept_with(out, ("unread pre",),
                                 lambda: cuda.device_array((1, 8), np.uint16)), out_map
    else:
        pre_map = tensor_map(pre, 64, min(cols, 64))
    signature = persistent.signature(epilogue, *layouts)
    # a copier's setmaxnreg needs the driver's whole-program JIT (the simulator's twin is
    # a no-op: its launch is numba's)
    whole = kernel.whole_program and not SIMULATOR
    if not whole:                      # (the JIT's load opts in by itself)
        allow_dynamic_shared(kernel, signature, tile.shared_bytes)
    units = ceil_div(tiles_m, cluster) * tiles_n * splits
    args = (out, pre, a, b, bias, turns, a_map, b_map, out_map, pre_map, np.int32(tiles_m),
            np.int32(tiles_n), np.int32(splits), np.int32(steps_per_split))
    if cluster == 1 and not whole:
        kernel[persistent.blocks(units), tile.threads, stream, tile.shared_bytes](*args)
    else:
        shape = (cluster, tile.threads, tile.shared_bytes)
        grid = (persistent.blocks(units) if cluster == 1
                else launch.cluster_blocks(kernel, signature, units, *shape, whole))
        launch.launch_by_driver(kernel, signature, grid, *shape, stream, args, whole)
