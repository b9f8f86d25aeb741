"""Decoding with a KV cache of fixed capacity: the embedding at each sequence's position,
the prompt's keys and values into the cache, and a step's attention against it.

NumPy twins: ``microgpt.reference.decode_embedding``, ``kv_cache_write`` and
``attention_decode``.

A decoding batch is B sequences, each at its own position. The state of sequence b is
a row of ``seq`` (B, 4) int32 on the device, columns ``SEQ_COLUMNS``: the token it will
run next, that token's position, how many tokens it has left to generate and how many it
has drawn (kernels/sampling.py advances it). No launch argument carries a position, so
one captured graph runs every step (microgpt.generate).

The cache of one layer is kv_cache (B, S, 2C), float32 or bf16: the keys in columns
[0:C] and the values in [C:2C] of each position's row, head h at columns h*D, the layout
of the QKV projection's columns [C:3C], so that a write is a copy of row slices.

decode_embedding: grid (ceil(C / block), B), out[b] = wte[token] + wpe[position]; a
sequence whose position is past the cache (it waits for the host to slide its window)
reads the last row of wpe, and its step changes nothing.

kv_cache_write: grid (ceil(2C / block), T, n), one thread per copied element: the T
prompt positions of qkv row r go to cache row slots[r], positions 0 .. T-1 (the prefill).

attention_decode: one new position per sequence, flash-decoding: grid (splits, H, B),
block THREADS, split s takes the keys [s * THREADS, (s + 1) * THREADS) of the positions
0 .. position. The split that holds the new position first copies its key and value from
qkv into the cache (the block reads them back after a barrier, and no other block reads
that row). The splits past the position return at once (the grid covers the whole cache,
since a captured launch cannot depend on the position), and the others count only
themselves. A thread takes a key for its score (its row's loads all in flight, GROUP
elements each; the split's max and sum by block reductions); then thread (r, c) takes
GROUP columns from c * GROUP of every (THREADS // ceil(D / GROUP))-th value row from r,
every load in flight before its first product (a chain of dependent loads was most of
the kernel's time), and the rows' sums meet in shared memory. A split alone (positions
below THREADS) writes the output itself; otherwise each split writes its (max, sum, D
partial outputs) to a scratch array, and the last split of a (sequence, head) to finish
(a ticket from an atomic counter, after a fence) combines them in split order, so the
result has the same bits whichever finishes last, and resets the counter for the next
launch.
"""
import functools
import math

import numpy as np
from numba import cuda, float32, int32, uint16

from ..atoms import copy_element
from ..cache import jit
from ..common import (REDUCE_SCRATCH, SIMULATOR, WARP, block_max, block_sum, ceil_div,
                      check_array, check_block_size, kept_with, row_block)
from ..device import GROUP
from ..precision import (check_activation, group_width, load_float32, load_group4,
                         store_float32)
from microgpt.reference import POSITION, SEQ_COLUMNS, TOKEN

BLOCK = 256                 # the copies
# attention_decode's block, and a split's keys: 256 leave positions 128-255 one split, no
# combine (andrea-120m's step at batch 1 over positions 16-216 on the H200: 495 against
# 507 us in the last round, 2,017 against 1,959 tok/s; docs/generation.md, session 20)
THREADS = 32 if SIMULATOR else 256
NEG_INF = np.float32(-np.inf)
ZERO = np.float32(0.0)


# ----------------------------------------------------------------------------------
# kernels

@jit
def _decode_embedding_kernel(out, seq, wte, wpe):
    # out (B, 1, C); seq (B, 4) int32; wte (V, C); wpe (S, C)
    c = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
    b = cuda.blockIdx.y
    if c < out.shape[2]:
        pos = min(seq[b, POSITION], wpe.shape[0] - 1)
        out[b, 0, c] = wte[seq[b, TOKEN], c] + wpe[pos, c]


@jit
def _kv_cache_write_kernel(kv_cache, qkv, slots):
    # kv_cache (B, S, 2C), qkv (n, T, 3C), slots (n,): kv_cache[slots[r], t] = qkv[r, t, C:]
    col = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
    t, r = cuda.blockIdx.y, cuda.blockIdx.z
    width = kv_cache.shape[2]
    if col < width:
        copy_element(kv_cache, (slots[r], t, col), qkv, (r, t, qkv.shape[2] - width + col))


@functools.cache
def _attention_decode_kernel(D, threads, width):
    """Head size D, a block of threads (a split of as many keys); width GROUP: the rows'
    head slices load in groups of GROUP elements (D a multiple of GROUP, aligned), else 1."""
    scale = np.float32(1.0 / math.sqrt(D))
    keys = threads                  # of a split: a thread a key for the scores
    lanes = ceil_div(D, GROUP)      # threads over a value row for p . v, GROUP columns each
    per_pass = threads // lanes     # value rows a pass of the block takes
    passes = ceil_div(keys, per_pass)
    padded, loaded = lanes * GROUP, passes * GROUP

    @cuda.jit(device=True, inline=True)
    def load_slice(out, at, arr, b, key, col, n):
        """out[at:at + GROUP] = arr[b, key, col:col + GROUP], the columns past n zeros."""
        if width == GROUP:
            load_group4(out, at, arr, (b, key, col))
        else:
            for j in range(GROUP):
                out[at + j] = load_float32(arr, (b, key, col + j)) if j < n else ZERO

    @jit
    def attention_decode_kernel(out, kv_cache, qkv, seq, partial, tickets):
        # out (B, 1, C), kv_cache (B, S, 2C), qkv (B, 1, 3C), seq (B, 4); partial
        # (B, H, splits, D + 2) float32 scratch, tickets (B, H) int32 (zero between launches)
        s, h, b = cuda.blockIdx.x, cuda.blockIdx.y, cuda.blockIdx.z
        tid = cuda.threadIdx.x
        C = out.shape[2]
        pos = seq[b, POSITION]
        if pos >= kv_cache.shape[1]:
            return                  # past the cache: the host slides its window first
        splits = (pos + keys) // keys       # the splits holding keys 0 .. pos
        if s >= splits:
            return
        q_row = cuda.shared.array(D, float32)
        p_tile = cuda.shared.array(keys, float32)
        sums = cuda.shared.array((per_pass, padded), float32)
        scratch = cuda.shared.array(REDUCE_SCRATCH, float32)
        last = cuda.shared.array(1, int32)
        key0 = s * keys
        n_keys = min(keys, pos + 1 - key0)              # this split's keys
        if tid < D:
            q_row[tid] = load_float32(qkv, (b, 0, h * D + tid)) * scale
            if key0 <= pos < key0 + keys:   # the new key and value into the cache, which
                copy_element(kv_cache, (b, pos, h * D + tid), qkv,   # the block reads
                             (b, 0, C + h * D + tid))                # after the barrier
                copy_element(kv_cache, (b, pos, C + h * D + tid), qkv,
                             (b, 0, 2 * C + h * D + tid))
        cuda.syncthreads()
        k_row = cuda.local.array(padded, float32)
        v = cuda.local.array(loaded, float32)
        acc = cuda.local.array(GROUP, float32)
        score = NEG_INF
        if tid < n_keys:            # the key's row, every load in flight, then the dot
            for i in range(lanes):
                load_slice(k_row, i * GROUP, kv_cache, b, key0 + tid, h * D + i * GROUP,
                           D - i * GROUP)
            score = ZERO
            for d in range(D):
                score += q_row[d] * k_row[d]
        top = block_max(score, scratch)
        p = ZERO
        if tid < n_keys:
            p = math.exp(score - top)
        p_tile[tid] = p
        total = block_sum(p, scratch)               # syncs: p_tile is seen
        # p . v: thread (r, c) takes GROUP columns from c * GROUP of the value rows r,
        # r + per_pass, ...; all its rows' loads first, in flight together
        r, c = tid // lanes, tid % lanes
        if r < per_pass:
            for i in range(passes):
                key = r + i * per_pass
                if key < n_keys:
                    load_slice(v, i * GROUP, kv_cache, b, key0 + key, C + h * D + c * GROUP,
                               D - c * GROUP)
            for j in range(GROUP):
                acc[j] = ZERO
            for i in range(passes):
                key = r + i * per_pass
                if key < n_keys:
                    weight = p_tile[key]
                    for j in range(GROUP):
                        acc[j] += weight * v[i * GROUP + j]
            for j in range(GROUP):
                sums[r, c * GROUP + j] = acc[j]
        cuda.syncthreads()
        if tid < D:                 # the rows' sums in row order
            acc0 = ZERO
            for i in range(per_pass):
                acc0 += sums[i, tid]
            if splits == 1:
                store_float32(out, (b, 0, h * D + tid), acc0 / total)
            else:
                partial[b, h, s, tid] = acc0
        if splits == 1:
            return                  # the only split: nothing to combine
        if tid == 0:
            partial[b, h, s, D] = top
            partial[b, h, s, D + 1] = total
        cuda.threadfence()          # the partials are seen before the ticket is
        cuda.syncthreads()
        if tid == 0:
            last[0] = cuda.atomic.add(tickets, (b, h), 1) == splits - 1
        cuda.syncthreads()
        if last[0] == 0:
            return
        if tid < D:                 # the last split combines them all, in split order
            top = NEG_INF
            for i in range(splits):
                top = max(top, partial[b, h, i, D])
            acc0 = ZERO
            total = ZERO
            for i in range(splits):
                weight = math.exp(partial[b, h, i, D] - top)
                acc0 += partial[b, h, i, tid] * weight
                total += partial[b, h, i, D + 1] * weight
            store_float32(out, (b, 0, h * D + tid), acc0 / total)
        if tid == 0:
            tickets[b, h] = 0
    return attention_decode_kernel


_F32, _BF16 = float32[:, :, ::1], uint16[:, :, ::1]
_SEQ, _SLOTS = int32[:, ::1], int32[::1]
_PARTIAL, _TICKETS = float32[:, :, :, ::1], int32[:, ::1]
PTX_SIGNATURES = [
    (_decode_embedding_kernel, (_F32, _SEQ, float32[:, ::1], float32[:, ::1])),
    (_kv_cache_write_kernel, (_F32, _F32, _SLOTS)),
    (_kv_cache_write_kernel, (_BF16, _BF16, _SLOTS)),
] + [(_attention_decode_kernel(D, THREADS, GROUP), (out, cache, qkv, _SEQ, _PARTIAL, _TICKETS))
     for D, (out, cache, qkv) in ((64, (_BF16, _BF16, _BF16)), (32, (_F32, _F32, _F32)),
                                  (72, (_F32, _F32, _F32)))]


# ----------------------------------------------------------------------------------
# launchers

def check_seq(seq, B):
    """seq: the (B, 4) int32 state of a decoding batch (SEQ_COLUMNS)."""
    check_array("seq", seq, (B, len(SEQ_COLUMNS)), np.int32)


def decode_embedding(out, seq, wte, wpe, *, block=None, stream=0):
    """out (B, 1, C) = wte[token] + wpe[position] of each sequence's row of seq (B, 4)."""
    if len(out.shape) != 3 or out.shape[1] != 1:
        raise ValueError(f"out: expected shape (B, 1, C), got {tuple(out.shape)}")
    B, _, C = out.shape
    check_array("out", out, (B, 1, C))
    check_seq(seq, B)
    check_array("wte", wte, (wte.shape[0], C))
    check_array("wpe", wpe, (wpe.shape[0], C))
    block = row_block(C, BLOCK) if block is None else block
    check_block_size(block)
    if B == 0:
        return
    _decode_embedding_kernel[(ceil_div(C, block), B), block, stream](out, seq, wte, wpe)


def kv_cache_write(kv_cache, qkv, slots, *, block=None, stream=0):
    """The prefill's keys and values: cache row slots[r] (of kv_cache (B, S, 2C)),
    positions 0 .. T-1, = the K and V columns [C:3C] of qkv (n, T, 3C) row r; the cache's
    other positions and rows are left as they are. Both arrays float32, or both bf16."""
    if len(qkv.shape) != 3 or qkv.shape[2] % 3:
        raise ValueError(f"qkv: expected shape (n, T, 3C), got {tuple(qkv.shape)}")
    n, T, C3 = qkv.shape
    C = C3 // 3
    check_activation("qkv", qkv, (n, T, C3))
    if len(kv_cache.shape) != 3:
        raise ValueError(f"kv_cache: expected shape (B, S, {2 * C}), got "
                         f"{tuple(kv_cache.shape)}")
    B, S = kv_cache.shape[:2]
    check_array("kv_cache", kv_cache, (B, S, 2 * C), qkv.dtype)
    check_array("slots", slots, (n,), np.int32)
    if T > S:
        raise ValueError(f"{T} positions do not fit in a cache of {S} positions")
    block = row_block(2 * C, BLOCK) if block is None else block
    check_block_size(block)
    if qkv.size == 0:
        return
    _kv_cache_write_kernel[(ceil_div(2 * C, block), T, n), block, stream](kv_cache, qkv, slots)


def attention_decode(out, kv_cache, qkv, seq, n_head, *, block=None, stream=0):
    """Each sequence's new position, its query in qkv (B, 1, 3C), attends to the cache's
    positions 0 .. position (kv_cache (B, S, 2C)), the new one's key and value read from
    qkv and written into the cache -> out (B, 1, C), the heads merged. A sequence whose
    position is past the cache is left as it is (out too). block: the threads of a
    split's block, a multiple of 32 and at least head_dim; a split is block keys (default
    THREADS, read at each launch: a bench sweeps it)."""
    if len(qkv.shape) != 3 or qkv.shape[1] != 1 or qkv.shape[2] % 3:
        raise ValueError(f"qkv: expected shape (B, 1, 3C), got {tuple(qkv.shape)}")
    B, _, C3 = qkv.shape
    C = C3 // 3
    if n_head < 1 or C % n_head:
        raise ValueError(f"n_head {n_head} does not divide d_model {C}")
    D = C // n_head
    check_activation("qkv", qkv, (B, 1, C3))
    check_activation("out", out, (B, 1, C))
    if len(kv_cache.shape) != 3:
        raise ValueError(f"kv_cache: expected shape (B, S, {2 * C}), got "
                         f"{tuple(kv_cache.shape)}")
    S = kv_cache.shape[1]
    check_array("kv_cache", kv_cache, (B, S, 2 * C), qkv.dtype)
    check_seq(seq, B)
    block = THREADS if block is None else block
    check_block_size(block, WARP)
    if block < D:
        raise ValueError(f"block {block} is below head_dim {D}: a thread owns each output "
                         "column; pass a larger block")
    if B == 0 or S == 0:
        return
    splits = ceil_div(S, block)
    width = group_width(D, kv_cache, qkv)
    # scratch kept with the output, so that a captured graph's addresses stay valid;
    # the tickets start at zero and every launch leaves them so
    partial = kept_with(out, ("attention_decode", B, n_head, splits, D), lambda: cuda.device_array(
        (B, n_head, splits, D + 2), np.float32))
    tickets = kept_with(out, ("attention_decode_tickets", B, n_head), lambda: cuda.to_device(
        np.zeros((B, n_head), np.int32)))
    _attention_decode_kernel(D, block, width)[(splits, n_head, B), block, stream](
        out, kv_cache, qkv, seq, partial, tickets)
