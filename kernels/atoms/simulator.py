"""The atoms' simulator twins: every name of ``atoms.gpu``, as a Python function of the
same signature, for numba's CUDA simulator (NUMBA_ENABLE_CUDASIM=1), which runs Python.

The warp-collective ones exchange what each lane holds through a module-level table, one
slot per thread, between two barriers: the simulator runs a block's threads together and
blocks one after another, so the table is the block's. Like the instructions, they must
be called by every thread of the block together (warp-uniform control flow, which the
kernels built on them keep); cp.async copies at once, so commit and wait are no-ops
here. The loads and stores of activations look at the array's dtype when called (the
simulator knows no overloads).
"""
import functools
import threading
import time

import ml_dtypes
import numpy as np
from numba import cuda

from ..common import device_address
from ..device import GROUP, MAX_THREADS, MMA_K, MMA_M, MMA_N, WARP, swizzle
from . import ATOMS

__all__ = ATOMS     # the package's list (tests/test_kernels_mma.py: each one defined)


@cuda.jit(device=True)
def _nothing():
    """The twin of an atom that commits, fences or waits for copies, which the twins make
    at once."""

_posted = np.zeros((MAX_THREADS, 6), np.int64)    # what each thread of the block holds
_posted_float = np.zeros(MAX_THREADS, np.float32)


def _bf16_value(bits):
    return float(np.uint16(bits).view(ml_dtypes.bfloat16))


def _bf16_bits(x):
    return int(np.float32(x).astype(ml_dtypes.bfloat16).view(np.uint16))


def _pair(reg):
    return _bf16_value(int(reg) & 0xFFFF), _bf16_value(int(reg) >> 16)


def _fragment_places():
    """Where each lane's registers of an m16n8k16 mma go: the flat index into A (16 x 16)
    of the two bf16 halves (low, high) of each of its 4 A registers, and into B (16 x 8,
    row-major) of those of its 2 B registers: the PTX ISA's fragment layout."""
    lane = np.arange(WARP)[:, None, None]
    g, t, half = lane // 4, lane % 4, np.arange(2)[None, None, :]
    reg = np.arange(4)[None, :, None]
    a_row = g + 8 * (reg % 2)
    a_col = 8 * (reg // 2) + 2 * t + half
    b_row = 8 * np.arange(2)[None, :, None] + 2 * t + half
    return (a_row * MMA_K + a_col).reshape(-1), (b_row * MMA_N + g).reshape(-1)


_A_PLACES, _B_PLACES = _fragment_places()


def _halves(regs):
    """The bf16 values of 32-bit registers, low half first, as float64."""
    bits = np.asarray(regs, np.int64).astype(np.uint32).view(np.uint16)
    return bits.view(ml_dtypes.bfloat16).astype(np.float64).reshape(-1)


@cuda.jit(device=True)
def mma_bf16_16816(a0, a1, a2, a3, b0, b1, c0, c1, c2, c3):
    tid = cuda.threadIdx.x
    _posted[tid] = a0, a1, a2, a3, b0, b1
    cuda.syncthreads()
    warp = _posted[tid - tid % WARP:][:WARP]
    a = np.empty(MMA_M * MMA_K)
    b = np.empty(MMA_K * MMA_N)
    a[_A_PLACES] = _halves(warp[:, :4])
    b[_B_PLACES] = _halves(warp[:, 4:6])
    cuda.syncthreads()
    g, t = tid % WARP // 4, tid % 4
    # exact in float64 for bf16 products of 16 terms, then one rounding
    d = a.reshape(MMA_M, MMA_K) @ b.reshape(MMA_K, MMA_N)
    return (np.float32(d[g, 2 * t] + c0), np.float32(d[g, 2 * t + 1] + c1),
            np.float32(d[g + 8, 2 * t] + c2), np.float32(d[g + 8, 2 * t + 1] + c3))


def _ldmatrix(trans):
    @cuda.jit(device=True)
    def ldmatrix(smem, index):
        tid = cuda.threadIdx.x
        _posted[tid, 0] = index
        cuda.syncthreads()
        rows = _posted[tid - tid % WARP:][:WARP, 0]
        g, t = tid % WARP // 4, tid % 4
        regs = []
        for q in range(4):
            matrix = rows[8 * q: 8 * q + 8]
            if trans:
                lo, hi = smem[matrix[2 * t] + g], smem[matrix[2 * t + 1] + g]
            else:
                lo, hi = smem[matrix[g] + 2 * t], smem[matrix[g] + 2 * t + 1]
            regs.append(np.uint32(int(lo) | int(hi) << 16))
        cuda.syncthreads()
        return tuple(regs)
    return ldmatrix

ldmatrix_x4 = _ldmatrix(False)
ldmatrix_x4_trans = _ldmatrix(True)


def _cp_async(size, cache):
    @cuda.jit(device=True)
    def cp_async(dst, dst_index, src, src_index, src_bytes):
        # src_bytes of the `size` copied, the rest zeros; the source counted in elements
        # from src's first one, as the device addresses it (a strided view's rows have
        # others between them, which reshape would drop)
        n, count = int(src_bytes) // dst.itemsize, size // dst.itemsize
        source = np.asarray(getattr(src, "_ary", src))
        flat = np.lib.stride_tricks.as_strided(source, (src_index + n,),
                                               (source.itemsize,), writeable=False)
        out = dst.reshape(-1)
        out[dst_index: dst_index + n] = flat[src_index: src_index + n]
        out[dst_index + n: dst_index + count] = 0
    return cp_async

cp_async_16 = _cp_async(16, "cg")
cp_async_4 = _cp_async(4, "ca")


@cuda.jit(device=True)
def exp2_ftz(x):
    if x < -126:
        return np.float32(0.0)
    with np.errstate(over="ignore"):    # inf, as the device's ex2 gives
        return np.float32(np.exp2(np.float32(x)))


@cuda.jit(device=True)
def rcp_approx(x):
    with np.errstate(divide="ignore", over="ignore"):    # inf, as the device's rcp gives
        return np.float32(1.0) / np.float32(x)


cp_async_commit = _nothing


def cp_async_wait_group(n):
    return _nothing


@cuda.jit(device=True)
def pack_bf16x2(lo, hi):
    return np.uint32(_bf16_bits(lo) | _bf16_bits(hi) << 16)


@cuda.jit(device=True)
def to_bf16(x):
    return np.uint16(_bf16_bits(x))


@cuda.jit(device=True)
def bits_to_float32(bits):
    return np.uint32(bits).view(np.float32)


@cuda.jit(device=True)
def shuffle_xor(value, lane_mask):
    tid = cuda.threadIdx.x
    _posted_float[tid] = value
    cuda.syncthreads()
    other = _posted_float[tid ^ lane_mask]
    cuda.syncthreads()
    return np.float32(other)


@cuda.jit(device=True)
def opaque(x):
    return np.int32(x)


@cuda.jit(device=True)
def words_to_b64(low, high):
    return np.uint64(int(high) << 32 | int(low))


@cuda.jit(device=True)
def warp_uniform(x):
    tid = cuda.threadIdx.x
    _posted[tid, 0] = x
    cuda.syncthreads()
    first = _posted[tid - tid % WARP, 0]
    cuda.syncthreads()
    return np.int32(first)


@cuda.jit(device=True)
def shared_address(smem, index):
    # the twin's shared memory starts at address 0: as the GPU's, aligned to 1024
    return np.uint32(2 * index)

_SWIZZLES = {1: 128, 2: 64, 3: 32}      # descriptor bits 62-63 -> swizzle row bytes


def _operand(smem, desc, rows, mn_major):
    """The rows x 16 operand (m or n by k) a descriptor describes, in float64."""
    desc = int(desc)
    start, lbo, sbo = (((desc >> shift) & 0x3FFF) << 4 for shift in (0, 16, 32))
    row_bytes = _SWIZZLES[desc >> 62]
    mn, k = np.arange(rows)[:, None], np.arange(MMA_K)[None, :]
    if mn_major:
        width = row_bytes // 2
        byte = (start + (mn % width) * 2 + (mn // width) * lbo + (k % 8) * row_bytes
                + (k // 8) * sbo)
    else:
        byte = start + (mn % 8) * row_bytes + (mn // 8) * sbo + k * 2
    byte ^= ((byte >> 7) & (row_bytes // 16 - 1)) << 4
    return smem[byte // 2].view(ml_dtypes.bfloat16).astype(np.float64)


@functools.cache
def wgmma_bf16(n, trans_a, trans_b):
    @cuda.jit(device=True)
    def wgmma(smem, desc_a, desc_b, acc):
        thread = cuda.threadIdx.x % 128
        g, t = thread % WARP // 4, thread % 4
        row = 16 * (thread // WARP) + g
        a = _operand(smem, desc_a, 64, trans_a)[[row, row + 8]]
        d = a @ _operand(smem, desc_b, n, trans_b).T      # (2, n), exact
        for j in range(n // 8):
            for h in range(2):
                for e in range(2):
                    r = 4 * j + 2 * h + e
                    acc[r] = np.float32(d[h, 8 * j + 2 * t + e] + acc[r])
    return wgmma


@functools.cache
def wgmma_bf16_acc(n, trans_a, trans_b):
    product = wgmma_bf16(n, trans_a, trans_b)

    @cuda.jit(device=True)
    def wgmma(smem, desc_a, desc_b, acc, accumulate):
        if not accumulate:
            acc[:] = np.float32(0.0)
        product(smem, desc_a, desc_b, acc)
    return wgmma


@functools.cache
def wgmma_bf16_rs(n, trans_b):
    @cuda.jit(device=True)
    def wgmma_rs(smem, a0, a1, a2, a3, desc_b, acc):
        # a thread's two rows of A come from the four lanes of its quad (the mma.sync A
        # layout): each posts its registers between two barriers of its warpgroup
        tid = cuda.threadIdx.x
        _posted[tid, :4] = a0, a1, a2, a3
        _wait_named(-100 - tid // 128, 128)
        quad = _posted[tid - tid % 4:][:4, :4].copy()
        _wait_named(-100 - tid // 128, 128)
        a = np.zeros((2, MMA_K))
        for t in range(4):
            for r in range(4):      # a0: row g, cols 2t | a1: g + 8 | a2: g, 8 + 2t | a3
                col = 8 * (r // 2) + 2 * t
                a[r % 2, col: col + 2] = _pair(quad[t, r])
        t = tid % 4
        d = a @ _operand(smem, desc_b, n, trans_b).T      # (2, n), exact
        for j in range(n // 8):
            for h in range(2):
                for e in range(2):
                    r = 4 * j + 2 * h + e
                    acc[r] = np.float32(d[h, 8 * j + 2 * t + e] + acc[r])
    return wgmma_rs


@cuda.jit(device=True)
def _acc_no_op(acc):
    pass


@cuda.jit(device=True)
def _warpgroup_done(acc):
    # the twin's wgmma is done at once, but by each thread apart: when one thread is
    # past the wait, the instruction's reads of shared memory are over for the whole
    # warpgroup, as on the GPU, only once all its threads have come here
    _wait_named(-1 - cuda.threadIdx.x // 128, 128)


def warpgroup_fence(regs):
    return _acc_no_op


def warpgroup_wait(n, regs):
    return _warpgroup_done


warpgroup_commit = _nothing


def set_max_registers(n, increase):
    return _nothing


fence_proxy_async = _nothing
fence_proxy_async_global = _nothing

# The mbarrier twins keep each barrier's state here, keyed by its address: (phase
# parity, arrivals pending, arrivals expected, bytes pending). The simulator runs a
# block's threads as Python threads, so a waiting thread spins (yielding) while the
# copying one makes progress.
_barriers = {}
_barrier_lock = threading.Lock()


def _barrier_key(bars, index):
    return bars.__array_interface__["data"][0] + 8 * int(index)


def _barrier_update(bars, index, arrivals, tx):
    with _barrier_lock:
        state = _barriers[_barrier_key(bars, index)]
        _check_not_failed(state)
        state[1] -= arrivals
        state[3] += tx
        if state[1] == 0 and state[3] == 0:       # the phase completes
            state[0] ^= 1
            state[1] = state[2]


@cuda.jit(device=True)
def mbarrier_init(bars, index, count):
    with _barrier_lock:
        _barriers[_barrier_key(bars, index)] = [0, int(count), int(count), 0]


@cuda.jit(device=True)
def mbarrier_arrive(bars, index, count):
    _barrier_update(bars, index, int(count), 0)


@cuda.jit(device=True)
def mbarrier_arrive_expect_tx(bars, index, nbytes):
    _barrier_update(bars, index, 1, int(nbytes))


@cuda.jit(device=True)
def mbarrier_try_wait(bars, index, parity):
    with _barrier_lock:
        state = _barriers[_barrier_key(bars, index)]
        _check_not_failed(state)
        done = state[0] != int(parity)
    if not done:
        time.sleep(0)
    return done


fence_barrier_init = _nothing


def _box(tensor_map, matrix, index):
    """(shared-memory indices of a box's elements, its rows, cols): the twin's tensor
    map holds the box (cols, rows), laid in rows of `cols` swizzled as the hardware's
    32-, 64- or 128-byte modes (tiles.swizzled), and the address and shape of the
    matrix it was made for. The hardware copies that matrix whatever the launch passes
    beside the map, so a map of any other fails here."""
    cols, rows = int(tensor_map[0]), int(tensor_map[1])
    described = tuple(int(word) for word in tensor_map[2:6])
    if described != (device_address(matrix), *matrix.shape, matrix.strides[0]):
        raise AssertionError(f"a tensor map of the matrix at {described[0]:#x} "
                             f"{described[1:3]}, rows {described[3]} bytes apart, used "
                             f"to copy the one at {device_address(matrix):#x} "
                             f"{tuple(matrix.shape)}, rows {matrix.strides[0]} apart")
    chunk = 16 // matrix.dtype.itemsize
    rows_per_line, phases = swizzle(cols // chunk)
    r, c = np.arange(rows)[:, None], np.arange(cols)[None, :]
    at = (c // chunk) ^ ((r // rows_per_line) % phases)
    return int(index) + r * cols + at * chunk + c % chunk, rows, cols


def _misplaced(matrix, col, smem, index):
    """What is wrong with a box from column col of matrix, at element index of smem (None
    if nothing): the hardware takes a box whose first element is 16-byte aligned in global
    memory (the row pitch and the matrix's start are: tma_ready) and lies 128-byte aligned
    in shared memory (the twins' shared memory starts at 0), and raises an illegal
    instruction, or a misaligned address, for any other (the H200, session 21's wgmma
    backward)."""
    off = int(col) * matrix.dtype.itemsize % 16
    if off:
        return (f"a bulk tensor copy of a box from column {int(col)}, {off} bytes past a "
                "16-byte boundary")
    at = int(index) * smem.dtype.itemsize
    if at % 128:
        return f"a bulk tensor copy of a box at shared byte {at}, off a 128-byte boundary"
    return None


def _check_not_failed(state):
    # a barrier whose copy failed holds the failure: the threads waiting on it fail too
    # (spinning on, they would keep the simulator's launch from ever returning)
    if isinstance(state, str):
        raise AssertionError(state)


@cuda.jit(device=True)
def tma_load_2d(smem, index, src, tensor_map, col, row, bars, bar):
    # copied at once, zero-filled past src's edges; then its bytes complete on the
    # barrier
    failure = _misplaced(src, col, smem, index)
    if failure:
        with _barrier_lock:
            _barriers[_barrier_key(bars, bar)] = failure
        raise AssertionError(failure)
    places, rows, cols = _box(tensor_map, src, index)
    box = np.zeros((rows, cols), src.dtype)
    part = src[row: row + rows, col: col + cols]
    box[:part.shape[0], :part.shape[1]] = part
    smem[places] = box
    _barrier_update(bars, bar, 0, -src.dtype.itemsize * rows * cols)


def _tma_store(add):
    @cuda.jit(device=True)
    def store(dst, tensor_map, col, row, smem, index):
        failure = _misplaced(dst, col, smem, index)
        if failure:
            raise AssertionError(failure)
        places, rows, cols = _box(tensor_map, dst, index)
        rows, cols = min(rows, dst.shape[0] - row), min(cols, dst.shape[1] - col)
        if rows <= 0 or cols <= 0:      # wholly past dst's edges: nothing written
            return
        box = smem[places][:rows, :cols]
        for r in range(rows):       # (the simulator's arrays take a row at a time)
            dst[row + r, col: col + cols] = (dst[row + r, col: col + cols] + box[r]
                                             if add else box[r])
    return store

tma_store_2d = _tma_store(False)
tma_add_2d = _tma_store(True)


bulk_commit = _nothing


bulk_wait = _nothing
bulk_wait_but_one = _nothing        # (the twins' stores are done when issued)
bulk_wait_written = _nothing

# thread block clusters: the twins are a cluster of one block (the simulator runs blocks
# one after another, so no two blocks could wait on each other)


@cuda.jit(device=True)
def cluster_rank():
    return 0


@cuda.jit(device=True)
def cluster_index():
    return cuda.blockIdx.x


@cuda.jit(device=True)
def cluster_count():
    return cuda.gridDim.x


@cuda.jit(device=True)
def cluster_sync():
    cuda.syncthreads()


def _only_this_block(rank_or_mask, one):
    if int(rank_or_mask) != one:
        raise AssertionError(f"{rank_or_mask}: the twins' cluster is this one block alone")


@cuda.jit(device=True)
def tma_load_2d_multicast(smem, index, src, tensor_map, col, row, bars, bar, mask):
    _only_this_block(mask, 1)
    tma_load_2d(smem, index, src, tensor_map, col, row, bars, bar)


@cuda.jit(device=True)
def mbarrier_arrive_cluster(bars, index, rank):
    _only_this_block(rank, 0)
    _barrier_update(bars, index, 1, 0)

_named_barriers = {}


def _wait_named(barrier, threads):
    with _barrier_lock:
        key = (int(barrier), int(threads))
        if key not in _named_barriers:
            _named_barriers[key] = threading.Barrier(int(threads))
    _named_barriers[key].wait()


@cuda.jit(device=True)
def named_barrier(barrier, threads):
    _wait_named(barrier, threads)


@cuda.jit(device=True)
def named_barrier_arrive(barrier, threads):
    # the arriving thread waits too: one of the schedules the hardware allows (the barrier
    # completing before it runs on), and the race check's, which joins the clocks of a
    # named barrier's threads (a kernel whose arriving warps must go on to do what the
    # waiting ones wait for would deadlock here, not on the GPU)
    _wait_named(barrier, threads)


@cuda.jit(device=True)
def fence_tensor_map(tensor_map):
    pass


# ----------------------------------------------------------------------------------
# activations in float32 or bf16 (precision)


def _flat(arr, index):
    """The flat position of arr[index] in arr's data, checked to start a group: on
    the GPU a misaligned vector access faults, here it fails the test."""
    flat = int(np.ravel_multi_index(index, arr.shape)) if isinstance(index, tuple) \
        else int(index)
    if flat % GROUP or arr.ctypes.data % (GROUP * arr.itemsize):
        raise IndexError(f"a group access at element {flat} of an array at "
                         f"{arr.ctypes.data:#x} is not aligned to {GROUP} elements")
    return flat


@cuda.jit(device=True)
def load_words4(arr, index):
    flat = _flat(arr, index)
    words = arr.reshape(-1)[flat: flat + GROUP]
    return words[0], words[1], words[2], words[3]


@cuda.jit(device=True)
def store_words4(arr, index, values):
    flat = _flat(arr, index)
    arr.reshape(-1)[flat: flat + GROUP] = values


@cuda.jit(device=True)
def store_pair(arr, index, word):
    i, c = int(index[0]), int(index[1])
    if (arr.ctypes.data + c * arr.strides[1] + i * arr.strides[0]) % 4:
        raise IndexError(f"a pair store at {index} is not 4-byte aligned")
    arr[i, c] = np.uint16(int(word) & 0xFFFF)
    arr[i, c + 1] = np.uint16(int(word) >> 16)


@cuda.jit(device=True)
def load_group4(out, at, arr, index):
    flat = _flat(arr, index)
    for i in range(GROUP):
        out[at + i] = load_float32(arr.reshape(-1), flat + i)


@cuda.jit(device=True)
def store_group4(arr, index, values, at):
    flat = _flat(arr, index)
    for i in range(GROUP):
        store_float32(arr.reshape(-1), flat + i, values[at + i])


@cuda.jit(device=True)
def load_float32(arr, index):
    if arr.dtype == np.uint16:
        return bits_to_float32(np.uint32(arr[index]) << np.uint32(16))
    return np.float32(arr[index])


@cuda.jit(device=True)
def store_float32(arr, index, value):
    arr[index] = to_bf16(value) if arr.dtype == np.uint16 else value


@cuda.jit(device=True)
def copy_element(dst, dst_index, src, src_index):
    if dst.dtype == src.dtype:
        dst[dst_index] = src[src_index]
    else:
        store_float32(dst, dst_index, load_float32(src, src_index))

