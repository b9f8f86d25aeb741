"""Sampling on the device: each sequence's next token from its logits, and its state
advanced, so that a decoding step copies nothing back to choose a token.

NumPy twin: ``microgpt.reference.sample_tokens`` (and ``sampling_probabilities``, the
distribution the draws follow; ``uniforms``, the generator).

sample_tokens: grid (B,), a block per sequence, each thread reading STRIP consecutive
logits at a time (their loads in flight together) on every pass. Temperature 0 is greedy
(the first of the largest logits), a kernel of its own: one pass, the finite check's.
Otherwise the logits are divided by the temperature, then kept: the top_k largest (0:
all, ties at the k-th kept too), then among those the smallest set of the largest whose
probabilities sum to at least top_p (1: all; ties kept too). The thresholds are exact,
with no sort, on the logits' order-preserving 32-bit keys: top_k's is the k-th largest
key, found a byte at a time from the most significant (4 passes, each a histogram in
shared memory of the next byte of the keys that match the bytes found so far: integer
counts, the same whatever order the atomics come in); top_p's by bisection (32 block
reductions of the masses, added in a fixed order). The
token is then drawn by the Gumbel-max trick, argmax over the kept logits of
x - log(-log(u)), which samples softmax(x) over them in one pass; u is a counter-based
generator, a hash of (seed, sequence, draw number, token id), so a draw depends on
nothing but its place, and a captured graph draws new numbers every step.

A sequence's row of seq (kernels/decode.py's SEQ_COLUMNS) is advanced when it is active
(tokens left, its position in the cache): the token drawn, its position + 1, one token
fewer left (none when it is stop_id), one more drawn. Logits that are not finite leave the
sequence with left = NOT_FINITE for the host to report.
"""
import math

import numpy as np
from numba import cuda, float32, int32, int64, uint16, uint32

from .cache import jit
from .common import (REDUCE_SCRATCH, SIMULATOR, WARP, block_max, block_sum, check_array,
                     check_block_size, shared_reduction, shuffle_reduction)
from .precision import check_activation, load_float32
from microgpt.reference import DRAWN, LEFT, NOT_FINITE, POSITION, SEQ_COLUMNS, TOKEN

BLOCK = 32 if SIMULATOR else 1024     # the simulator runs a thread at a time
STRIP = 8                   # consecutive logits a thread reads at a time: loads in flight
RADIX = 256                 # top_k's threshold a byte of the key at a time
RADIX_GROUP = 16            # bytes a thread sums before the scan for the threshold's byte
RADIX_GROUPS = RADIX // RADIX_GROUP
NEG_INF = np.float32(-np.inf)
ZERO = np.float32(0.0)
ONE = np.float32(1.0)
SIGN = 0x7FFFFFFF
# the generator's constants (lowbias32, C. Wellons' integer hash)
_M1, _M2 = 0x7FEB352D, 0x846CA68B
_U24 = np.float32(2.0**-24)


@cuda.jit(device=True, inline=True)
def _min(a, b):
    return min(a, b)


block_min = (shared_reduction if SIMULATOR else shuffle_reduction)(_min, np.float32(np.inf))

if not SIMULATOR:
    from numba.cuda import libdevice

    @cuda.jit(device=True, inline=True)
    def float_key(x):
        """An int32 in the order of the float32 x (not NaN)."""
        i = libdevice.float_as_int(x)
        return i if i >= 0 else i ^ int32(SIGN)

    @cuda.jit(device=True, inline=True)
    def hash32(x):
        # numba types integer arithmetic 64 bits wide: each step is cut back to 32
        x = uint32(x)
        x = uint32(x ^ (x >> uint32(16)))
        x = uint32(x * uint32(_M1))
        x = uint32(x ^ (x >> uint32(15)))
        x = uint32(x * uint32(_M2))
        return uint32(x ^ (x >> uint32(16)))
else:
    @cuda.jit(device=True)
    def float_key(x):
        i = int(np.float32(x).view(np.int32))
        return i if i >= 0 else i ^ SIGN

    @cuda.jit(device=True)
    def hash32(x):
        x = int(x) & 0xFFFFFFFF
        x ^= x >> 16
        x = (x * _M1) & 0xFFFFFFFF
        x ^= x >> 15
        x = (x * _M2) & 0xFFFFFFFF
        x ^= x >> 16
        return x


@cuda.jit(device=True, inline=True)
def uniform(base, i):
    """A uniform draw in (0, 1) for token i of the draw whose hash is base."""
    return (float32(hash32(base ^ hash32(i)) >> uint32(8)) + np.float32(0.5)) * _U24


@cuda.jit(device=True, inline=True)
def _state(seq, b, capacity):
    """Sequence b's (position, tokens left, tokens drawn) and whether it draws now (tokens
    left, its position in the cache: else done, or waiting for its window to slide)."""
    pos, left, drawn = seq[b, POSITION], seq[b, LEFT], seq[b, DRAWN]
    return pos, left, drawn, left > 0 and pos < capacity


@cuda.jit(device=True, inline=True)
def _first_pass(seq, b, logits, vocab, scratch):
    """The pass over sequence b's first vocab logits that both kernels begin with ->
    (the largest, this thread's first index of it or vocab, whether all are finite: if
    not, thread 0 marks the sequence NOT_FINITE for the host to report)."""
    tid, threads = cuda.threadIdx.x, cuda.blockDim.x
    best = NEG_INF
    first = vocab                   # the first index of this thread's largest
    finite = ONE
    for start in range(tid * STRIP, vocab, threads * STRIP):
        for i in range(start, start + STRIP):
            if i < vocab:
                x = load_float32(logits, (b, i))
                if not math.isfinite(x):
                    finite = ZERO
                if x > best:
                    best, first = x, i
    most = block_max(best, scratch)
    if -block_max(-finite, scratch) == ZERO:        # the minimum
        if tid == 0:
            seq[b, LEFT] = NOT_FINITE
        return most, vocab, False
    return most, first if best == most else vocab, True


@(jit if SIMULATOR else jit(launch_bounds=BLOCK))
def _greedy_tokens_kernel(seq, logits, capacity, vocab, stop_id):
    # seq (B, 4) int32, logits (B, V): the first of the largest of the first vocab, in the
    # one pass that checks they are finite
    b = cuda.blockIdx.x
    scratch = cuda.shared.array(REDUCE_SCRATCH, float32)
    pos, left, drawn, draws = _state(seq, b, capacity)
    if not draws:
        return
    _, first, finite = _first_pass(seq, b, logits, vocab, scratch)
    if finite:
        _advance(seq, b, int32(block_min(float32(first), scratch)), pos, left, drawn, stop_id)


# BLOCK threads leave a thread 64 registers: the bound holds ptxas to them (the H200's
# compile without it took more, and the launch failed for want of registers)
@(jit if SIMULATOR else jit(launch_bounds=BLOCK))
def _sample_tokens_kernel(seq, logits, capacity, vocab, temperature, top_k, top_p, seed,
                          stop_id):
    # seq (B, 4) int32, logits (B, V): the first vocab logits are eligible; temperature > 0
    b, tid, threads = cuda.blockIdx.x, cuda.threadIdx.x, cuda.blockDim.x
    scratch = cuda.shared.array(REDUCE_SCRATCH, float32)
    pos, left, drawn, draws = _state(seq, b, capacity)
    if not draws:
        return
    inv_t = ONE / temperature
    most, _, finite = _first_pass(seq, b, logits, vocab, scratch)
    if not finite:
        return
    top = most * inv_t      # the largest x * inv_t: rounding keeps the order (inv_t > 0)
    # keep the keys >= floor: bisections on int32 keys, held in int64
    floor = int64(-2**31)
    if 0 < top_k < vocab:
        floor = _kth_largest_key(logits, b, vocab, inv_t, top_k)
    if top_p < ONE:
        total = ZERO
        for start in range(tid * STRIP, vocab, threads * STRIP):
            for i in range(start, start + STRIP):
                if i < vocab:
                    x = load_float32(logits, (b, i)) * inv_t
                    if float_key(x) >= floor:
                        total += math.exp(x - top)
        total = block_sum(total, scratch)
        floor = _bisect_mass(logits, b, vocab, inv_t, top, floor, top_p * total, scratch)
    base = hash32(hash32(hash32(seed) ^ uint32(b)) ^ uint32(drawn))
    best = NEG_INF
    best_i = vocab
    for start in range(tid * STRIP, vocab, threads * STRIP):
        for i in range(start, start + STRIP):
            if i < vocab:
                x = load_float32(logits, (b, i)) * inv_t
                if float_key(x) >= floor:
                    score = x - math.log(-math.log(uniform(base, i)))
                    if score > best:
                        best, best_i = score, i
    most = block_max(best, scratch)
    _advance(seq, b, int32(block_min(float32(best_i) if best == most else float32(vocab),
                                     scratch)), pos, left, drawn, stop_id)


@cuda.jit(device=True, inline=True)
def _advance(seq, b, token, pos, left, drawn, stop_id):
    """Sequence b's state after it drew token (thread 0 writes it)."""
    if cuda.threadIdx.x == 0:
        seq[b, TOKEN] = token
        seq[b, POSITION] = pos + 1
        seq[b, LEFT] = 0 if token == stop_id else left - 1
        seq[b, DRAWN] = drawn + 1


@cuda.jit(device=True)
def _kth_largest_key(logits, b, vocab, inv_t, k):
    """The k-th largest key (the largest t such that at least k of the keys are >= t), k
    in [1, vocab): its bytes from the most significant, each the byte at which the count
    of the keys that match the bytes above it, from the largest byte down, reaches the k
    still to find. Keys in the unsigned order (key + 2^31), held in int64."""
    tid, threads = cuda.threadIdx.x, cuda.blockDim.x
    hist = cuda.shared.array(RADIX, int32)
    groups = cuda.shared.array(RADIX_GROUPS, int32)
    found = cuda.shared.array(2, int64)         # the byte, the k left to find below it
    prefix, left = int64(0), int64(k)
    for shift in range(24, -8, -8):
        for i in range(tid, RADIX, threads):
            hist[i] = 0
        cuda.syncthreads()
        for start in range(tid * STRIP, vocab, threads * STRIP):
            for i in range(start, start + STRIP):
                if i < vocab:
                    u = int64(float_key(load_float32(logits, (b, i)) * inv_t)) + 2**31
                    if u >> (shift + 8) == prefix >> (shift + 8):
                        cuda.atomic.add(hist, (u >> shift) & (RADIX - 1), 1)
        cuda.syncthreads()
        # the groups' counts in parallel, then one thread walks down the groups and the
        # bytes of the group where the count reaches left
        for g in range(tid, RADIX_GROUPS, threads):
            count = 0
            for j in range(RADIX_GROUP):
                count += hist[RADIX - 1 - g * RADIX_GROUP - j]
            groups[g] = count
        cuda.syncthreads()
        if tid == 0:                # (bounded: the counts reach left by the last group)
            above, g = int64(0), 0
            while g < RADIX_GROUPS - 1 and above + groups[g] < left:
                above += groups[g]
                g += 1
            byte = RADIX - 1 - g * RADIX_GROUP
            while byte > RADIX - (g + 1) * RADIX_GROUP and above + hist[byte] < left:
                above += hist[byte]
                byte -= 1
            found[0], found[1] = byte, left - above
        cuda.syncthreads()
        prefix |= found[0] << shift
        left = found[1]
        cuda.syncthreads()          # found and hist are rewritten by the next byte's pass
    return prefix - 2**31


@cuda.jit(device=True)
def _bisect_mass(logits, b, vocab, inv_t, top, floor, target, scratch):
    """The largest key t >= floor such that the keys >= t hold at least target of the
    mass exp(x - top)."""
    lo, hi = floor, int64(2**31)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        mass = ZERO
        for start in range(cuda.threadIdx.x * STRIP, vocab, cuda.blockDim.x * STRIP):
            for i in range(start, start + STRIP):
                if i < vocab:
                    x = load_float32(logits, (b, i)) * inv_t
                    if float_key(x) >= mid:
                        mass += math.exp(x - top)
        if block_sum(mass, scratch) >= target:
            lo = mid
        else:
            hi = mid
    return lo


PTX_SIGNATURES = [signature for logits in (float32[:, ::1], uint16[:, ::1]) for signature in (
    (_sample_tokens_kernel, (int32[:, ::1], logits, int64, int64, float32, int64, float32,
                             int64, int64)),
    (_greedy_tokens_kernel, (int32[:, ::1], logits, int64, int64, int64)))]


def sample_tokens(seq, logits, capacity, *, vocab=None, temperature=0.0, top_k=0,
                  top_p=1.0, seed=0, stop_id=-1, block=BLOCK, stream=0):
    """The next token of each active sequence of seq (B, 4) from its row of logits (B, V),
    float32 or bf16, the first vocab of them eligible (default V): greedy at temperature
    0, else sampled after temperature, top_k (0: all) and top_p (1: all); seq advanced
    (kernels/decode.py's SEQ_COLUMNS). capacity: the cache's positions; a sequence at it
    is left as it is. stop_id: the token that ends a sequence (-1: none)."""
    if len(logits.shape) != 2:
        raise ValueError(f"logits: expected shape (B, V), got {tuple(logits.shape)}")
    B, V = logits.shape
    check_activation("logits", logits, (B, V))
    check_array("seq", seq, (B, len(SEQ_COLUMNS)), np.int32)
    vocab = V if vocab is None else vocab
    if not 1 <= vocab <= V:
        raise ValueError(f"vocab must lie in [1, {V}], got {vocab}")
    if temperature < 0 or top_k < 0 or not 0 < top_p <= 1:
        raise ValueError(f"temperature >= 0, top_k >= 0 and top_p in (0, 1] are needed, got "
                         f"{temperature}, {top_k}, {top_p}")
    check_block_size(block, WARP)
    if B == 0:
        return
    if temperature == 0:
        _greedy_tokens_kernel[B, block, stream](seq, logits, capacity, vocab, stop_id)
        return
    _sample_tokens_kernel[B, block, stream](seq, logits, capacity, vocab,
                                            np.float32(temperature), top_k,
                                            np.float32(top_p), seed & 0xFFFFFFFF, stop_id)
