"""The tensor-core atoms (kernels/atoms/) against NumPy, one tiny kernel per atom.

The same tests run the simulator twins (CI) and the PTX instructions (the GPU profile), so
passing both says the twins compute what the hardware does, fragment layouts included.
"""
import ast
import functools
import pathlib

import ml_dtypes
import numpy as np
import pytest
from helpers import ON_GPU, assert_close, poisoned
from hypothesis import given
from hypothesis import strategies as st
from numba import cuda, float32, int32, uint16, uint32, uint64

from microgpt.kernels import atoms, common
from microgpt.kernels.atoms import (bits_to_float32, bulk_commit, bulk_wait, cp_async_4,
                                    cp_async_16, cp_async_commit, cp_async_wait_group,
                                    exp2_ftz, fence_barrier_init, fence_proxy_async,
                                    fence_tensor_map, ldmatrix_x4, ldmatrix_x4_trans,
                                    mbarrier_arrive_expect_tx, mbarrier_init,
                                    mbarrier_try_wait, mma_bf16_16816, pack_bf16x2,
                                    rcp_approx, shared_address, shuffle_xor, store_pair,
                                    tma_add_2d,
                                    tma_load_2d, tma_store_2d, to_bf16, warp_uniform,
                                    warpgroup_commit, warpgroup_fence, warpgroup_wait,
                                    wgmma_bf16, words_to_b64)
from microgpt.kernels.device import CHUNK, SHARED_ALIGN
from microgpt.kernels.layouts.tensor_maps import tensor_map

SEEDS = st.integers(0, 2**32 - 1)
wait_all = cp_async_wait_group(0)
ATOMS = pathlib.Path(__file__).resolve().parents[1] / "kernels" / "atoms"


def public_definitions(path):
    """The public names an atoms module defines at its top level, read from its source:
    atoms.gpu cannot be imported where the simulator runs."""
    defined = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            defined.add(node.name)
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                for name in target.elts if isinstance(target, ast.Tuple) else [target]:
                    if isinstance(name, ast.Name):
                        defined.add(name.id)
    return {name for name in defined if not name.startswith("_")}


def test_the_simulator_twins_are_the_atoms():
    """atoms.gpu (its modules together, each atom in one of them) and atoms.simulator each
    define every atom of the package's list and nothing else public: a twin missing, or an
    atom left out of the list, fails here rather than on the other machine."""
    assert len(set(atoms.ATOMS)) == len(atoms.ATOMS)
    on_gpu = [public_definitions(ATOMS / "gpu" / f"{part}.py")
              for part in ("warp", "hopper", "memory")]
    assert sum(len(part) for part in on_gpu) == len(set().union(*on_gpu)), "defined twice"
    assert set().union(*on_gpu) == set(atoms.ATOMS)
    assert public_definitions(ATOMS / "simulator.py") == set(atoms.ATOMS)
    assert all(callable(getattr(atoms, name)) for name in atoms.ATOMS)


def bf16_bits(rng, *shape):
    """Random bf16 values as uint16 bit patterns, and the same values in float64."""
    x = rng.standard_normal(shape).astype(np.float32).astype(ml_dtypes.bfloat16)
    return x.view(np.uint16), x.astype(np.float64)


@cuda.jit
def mma_kernel(d, a, b, c):
    # d, c (16, 8) float32; a (16, 16), b (16, 8) bf16 bits; one warp, the documented
    # fragment layout: g = lane // 4 picks rows (A, C) or the column (B), t = lane % 4 pairs
    lane = cuda.threadIdx.x
    g, t = lane // 4, lane % 4
    a_regs = cuda.local.array(4, uint32)
    for r in range(4):
        row, col = g + 8 * (r % 2), 2 * t + 8 * (r // 2)
        a_regs[r] = uint32(a[row, col]) | uint32(a[row, col + 1]) << 16
    b0 = uint32(b[2 * t, g]) | uint32(b[2 * t + 1, g]) << 16
    b1 = uint32(b[2 * t + 8, g]) | uint32(b[2 * t + 9, g]) << 16
    out = mma_bf16_16816(a_regs[0], a_regs[1], a_regs[2], a_regs[3], b0, b1,
                         c[g, 2 * t], c[g, 2 * t + 1], c[g + 8, 2 * t], c[g + 8, 2 * t + 1])
    d[g, 2 * t], d[g, 2 * t + 1] = out[0], out[1]
    d[g + 8, 2 * t], d[g + 8, 2 * t + 1] = out[2], out[3]


@given(seed=SEEDS)
def test_mma_matches_numpy(seed):
    rng = np.random.default_rng(seed)
    a, a64 = bf16_bits(rng, 16, 16)
    b, b64 = bf16_bits(rng, 16, 8)
    c = rng.standard_normal((16, 8)).astype(np.float32)
    d = cuda.to_device(poisoned((16, 8)))
    mma_kernel[1, 32](d, cuda.to_device(a), cuda.to_device(b), cuda.to_device(c))
    # bf16 products are exact in float32; 16 sums and one add of c round ~1e-7 each
    assert_close(d.copy_to_host(), a64 @ b64 + c, 1e-6, "mma m16n8k16")


def ldmatrix_kernel(trans):
    load = ldmatrix_x4_trans if trans else ldmatrix_x4

    @cuda.jit
    def kernel(out, m, rows):
        # out (32, 4) uint32: each lane's registers; m (16, 16) bf16 bits, staged in shared
        # memory; rows (32,): the row of m whose first 8 (or last 8) elements lane l
        # addresses, rows[l] * 16 + 8 * (l // 16)
        smem = cuda.shared.array(256, uint16, alignment=SHARED_ALIGN)
        lane = cuda.threadIdx.x
        for e in range(lane, 256, 32):
            smem[e] = m[e // 16, e % 16]
        cuda.syncthreads()
        regs = load(smem, int32(rows[lane] * 16 + 8 * (lane // 16)))
        for r in range(4):
            out[lane, r] = regs[r]
    return kernel


LDMATRIX = {trans: ldmatrix_kernel(trans) for trans in (False, True)}


@given(seed=SEEDS, trans=st.booleans())
def test_ldmatrix_delivers_the_documented_fragments(seed, trans):
    rng = np.random.default_rng(seed)
    m, _ = bf16_bits(rng, 16, 16)
    rows = rng.permutation(16)[np.arange(32) % 16].astype(np.int32)   # any row per lane
    out = cuda.to_device(np.full((32, 4), 0xDEADBEEF, np.uint32))
    LDMATRIX[trans][1, 32](out, cuda.to_device(m), cuda.to_device(rows))
    expected = np.empty((32, 4), np.uint32)
    for lane in range(32):
        g, t = lane // 4, lane % 4
        for q in range(4):           # matrix q: the 8 rows lanes 8q..8q+7 address
            starts = [(rows[8 * q + i], 8 * ((8 * q + i) // 16)) for i in range(8)]
            if trans:
                (r0, c0), (r1, c1) = starts[2 * t], starts[2 * t + 1]
                lo, hi = m[r0, c0 + g], m[r1, c1 + g]
            else:
                r, c = starts[g]
                lo, hi = m[r, c + 2 * t], m[r, c + 2 * t + 1]
            expected[lane, q] = int(lo) | int(hi) << 16
    np.testing.assert_array_equal(out.copy_to_host(), expected)


@cuda.jit
def cp_async_kernel(out, src, src_chunk, src_bytes):
    # out (n_chunks * 8,) bf16 bits; chunk i of out gets src_bytes[i] bytes of src from
    # element 8 * src_chunk[i] on, the rest zeros
    smem = cuda.shared.array(256, uint16, alignment=SHARED_ALIGN)
    i = cuda.threadIdx.x
    for e in range(CHUNK):
        smem[CHUNK * i + e] = uint16(0xFFFF)
    cuda.syncthreads()
    cp_async_16(smem, int32(CHUNK * i), src, np.int64(CHUNK * src_chunk[i]),
                uint32(src_bytes[i]))
    cp_async_commit()
    wait_all()
    cuda.syncthreads()
    for e in range(CHUNK):
        out[CHUNK * i + e] = smem[CHUNK * i + e]


@given(seed=SEEDS)
def test_cp_async_copies_and_zero_fills(seed):
    rng = np.random.default_rng(seed)
    src, _ = bf16_bits(rng, 6, 16)             # a 2-D source: indexed through its flat data
    chunks = 32
    src_chunk = rng.integers(0, src.size // CHUNK, chunks).astype(np.int32)
    src_bytes = rng.choice([0, 16], chunks).astype(np.int32)
    out = cuda.to_device(np.full(chunks * CHUNK, 0xDEAD, np.uint16))
    cp_async_kernel[1, chunks](out, cuda.to_device(src), cuda.to_device(src_chunk),
                               cuda.to_device(src_bytes))
    flat = src.reshape(-1)
    expected = np.concatenate([flat[CHUNK * c: CHUNK * c + CHUNK] if n else np.zeros(CHUNK)
                               for c, n in zip(src_chunk, src_bytes)]).astype(np.uint16)
    np.testing.assert_array_equal(out.copy_to_host(), expected)


@cuda.jit
def convert_kernel(pairs, singles, back, x):
    # pairs (n // 2,) uint32; singles (n,) bf16 bits; back (n,) float32: singles widened
    i = cuda.grid(1)
    if i < x.shape[0]:
        singles[i] = to_bf16(x[i])
        back[i] = bits_to_float32(uint32(singles[i]) << 16)
        if i % 2 == 0:
            pairs[i // 2] = pack_bf16x2(x[i], x[i + 1])


def test_bf16_conversions_round_to_nearest_even():
    rng = np.random.default_rng(3)
    x = rng.standard_normal(1024).astype(np.float32) * np.float32(1e3)
    # exact ties: halfway between two bf16 values, with an even and an odd lower neighbour
    ties = (np.arange(64, dtype=np.uint32) << 16 | 0x8000) + (0x3F80 << 16)
    x[:64] = ties.view(np.float32)
    x[64:70] = [np.inf, -np.inf, 3.4e38, -0.0, 1e-40, -1e-40]
    n = x.size
    pairs, singles = cuda.to_device(np.zeros(n // 2, np.uint32)), cuda.to_device(
        np.zeros(n, np.uint16))
    back = cuda.to_device(poisoned(n))
    convert_kernel[n // 128, 128](pairs, singles, back, cuda.to_device(x))
    expected = x.astype(ml_dtypes.bfloat16)
    bits = expected.view(np.uint16)
    np.testing.assert_array_equal(singles.copy_to_host(), bits)
    np.testing.assert_array_equal(pairs.copy_to_host(),
                                  bits[0::2].astype(np.uint32) | bits[1::2].astype(np.uint32)
                                  << 16)
    np.testing.assert_array_equal(back.copy_to_host(), expected.astype(np.float32))


@cuda.jit
def shuffle_kernel(out, x, lane_mask):
    i = cuda.threadIdx.x
    out[i] = shuffle_xor(x[i], lane_mask)


@given(seed=SEEDS, lane_mask=st.sampled_from([1, 2, 4, 8, 16]))
def test_shuffle_xor_exchanges_within_the_warp(seed, lane_mask):
    x = np.random.default_rng(seed).standard_normal(64).astype(np.float32)   # two warps
    out = cuda.to_device(poisoned(64))
    shuffle_kernel[1, 64](out, cuda.to_device(x), lane_mask)
    np.testing.assert_array_equal(out.copy_to_host(), x[np.arange(64) ^ lane_mask])


@cuda.jit
def uniform_kernel(out, x):
    i = cuda.threadIdx.x
    out[i] = warp_uniform(x[i])


@given(seed=SEEDS)
def test_warp_uniform_is_lane_0s_value(seed):
    x = np.random.default_rng(seed).integers(-2**31, 2**31, 64).astype(np.int32)  # two warps
    out = cuda.to_device(np.zeros(64, np.int32))
    uniform_kernel[1, 64](out, cuda.to_device(x))
    np.testing.assert_array_equal(out.copy_to_host(), x[np.arange(64) // 32 * 32])


@cuda.jit
def words_kernel(out, low, high):
    i = cuda.threadIdx.x
    out[i] = words_to_b64(low[i], high[i])


@given(seed=SEEDS)
def test_words_to_b64_joins_the_words(seed):
    low, high = np.random.default_rng(seed).integers(0, 2**32, (2, 32), dtype=np.uint64)
    out = cuda.to_device(np.zeros(32, np.uint64))
    words_kernel[1, 32](out, cuda.to_device(low.astype(np.uint32)),
                        cuda.to_device(high.astype(np.uint32)))
    np.testing.assert_array_equal(out.copy_to_host(), high << np.uint64(32) | low)


@cuda.jit
def pair_kernel(out, words):
    i = cuda.threadIdx.x
    for c in range(words.shape[1]):
        store_pair(out, (uint32(i), uint32(2 * c)), words[i, c])


@given(seed=SEEDS)
def test_store_pair_writes_a_word_into_two_elements_of_a_row(seed):
    """Into a view whose rows lie apart (a head of fused rows), the low half first; the
    elements around it untouched."""
    words = np.random.default_rng(seed).integers(0, 2**32, (4, 3), dtype=np.uint64)
    words = words.astype(np.uint32)
    rows = cuda.to_device(np.full((4, 16), 0xFFFF, np.uint16))
    pair_kernel[1, 4](rows[:, 4:10], cuda.to_device(words))
    want = np.full((4, 16), 0xFFFF, np.uint16)
    want[:, 4:10] = words.view(np.uint16)
    np.testing.assert_array_equal(rows.copy_to_host(), want)


# wgmma.m64nNk16 with both operands in shared memory. The image holds A (64 x 16) from byte
# 0 and B (16 x N) from WGMMA_B, each laid out as its descriptor says (PTX ISA, "Shared
# Memory Matrix Layout" and "Matrix Descriptor Format"), the bytes between them random.
WGMMA_N, WGMMA_B, WGMMA_IMAGE = 32, 8192, 12288


@functools.cache
def wgmma_kernel(trans_a, trans_b):
    regs = WGMMA_N // 2
    mma = wgmma_bf16(WGMMA_N, trans_a, trans_b)
    fence, wait = warpgroup_fence(regs), warpgroup_wait(0, regs)

    @cuda.jit
    def kernel(d, image, c, fields):
        # d, c (64, N) float32; image (WGMMA_IMAGE // 2,) bf16 bits; fields (2,): the
        # descriptors' bits other than the start address, of A and of B; one warpgroup.
        # Thread i holds d[4j + 2h + e] = D[16w + g + 8h, 8j + 2t + e] (w = i // 32, g and
        # t of lane i % 32), the C layout of mma.sync for every 8 columns
        smem = cuda.shared.array(0, uint16)
        start = (1024 - shared_address(smem, 0) % 1024) % 1024 // 2    # 1024-aligned
        for e in range(cuda.threadIdx.x, image.shape[0], 128):
            smem[start + e] = image[e]
        fence_proxy_async()
        cuda.syncthreads()
        i = cuda.threadIdx.x
        row, t = 16 * (i // 32) + i % 32 // 4, i % 4
        acc = cuda.local.array(regs, float32)
        for j in range(WGMMA_N // 8):
            for h in range(2):
                for e in range(2):
                    acc[4 * j + 2 * h + e] = c[row + 8 * h, 8 * j + 2 * t + e]
        # a descriptor: bits 0-13 the start address >> 4, the rest the fields
        desc_a = uint64(shared_address(smem, int32(start)) >> 4 & 0x3FFF) | fields[0]
        desc_b = uint64(shared_address(smem, int32(start + WGMMA_B // 2)) >> 4
                        & 0x3FFF) | fields[1]
        fence(acc)
        mma(smem, desc_a, desc_b, acc)
        warpgroup_commit()
        wait(acc)
        for j in range(WGMMA_N // 8):
            for h in range(2):
                for e in range(2):
                    d[row + 8 * h, 8 * j + 2 * t + e] = acc[4 * j + 2 * h + e]
    return kernel


def place(image, offset, operand, mn_major, row_bytes):
    """operand (mn x 16: A, or B transposed) into image from byte offset, in the swizzled
    layout of rows of row_bytes (32, 64, 128); returns the descriptor's fields. K-major: row
    r holds m (or n) = r, 8-row atoms `stride` apart. MN-major: row r holds k = r % 8 +
    8 * (r // 8) for row_bytes / 2 of m in a panel, groups of 8 k `stride` apart, panels of
    the next m `lead` apart. The swizzle XORs address bits 4.. with bits 7.. (as many bits
    as row_bytes has 16-byte chunks, log2)."""
    mn, k = np.indices(operand.shape)
    stride = 8 * row_bytes
    if mn_major:
        width, lead = row_bytes // 2, 2 * stride
        byte = (mn % width) * 2 + mn // width * lead + k % 8 * row_bytes + k // 8 * stride
    else:
        lead = 16            # unused
        byte = mn % 8 * row_bytes + mn // 8 * stride + k * 2
    byte ^= (byte >> 7 & (row_bytes // 16 - 1)) << 4
    image[(offset + byte) // 2] = operand
    swizzle = {128: 1, 64: 2, 32: 3}[row_bytes]
    return (lead >> 4) << 16 | (stride >> 4) << 32 | swizzle << 62


@given(seed=SEEDS)
@pytest.mark.parametrize("trans_a, trans_b, a_row_bytes, b_row_bytes", [
    (False, False, 128, 128), (True, True, 128, 64), (True, True, 32, 32),
    (False, True, 64, 128), (True, False, 64, 32)])
def test_wgmma_matches_numpy(seed, trans_a, trans_b, a_row_bytes, b_row_bytes):
    """Every swizzle, both majors of each operand, MN-major operands over several panels
    (the leading offset) and within one wider than the operand."""
    rng = np.random.default_rng(seed)
    image, _ = bf16_bits(rng, WGMMA_IMAGE // 2)
    a, a64 = bf16_bits(rng, 64, 16)
    b, b64 = bf16_bits(rng, 16, WGMMA_N)
    fields = np.array([place(image, 0, a, trans_a, a_row_bytes),
                       place(image, WGMMA_B, b.T, trans_b, b_row_bytes)], np.uint64)
    c = rng.standard_normal((64, WGMMA_N)).astype(np.float32)
    d = cuda.to_device(poisoned((64, WGMMA_N)))
    wgmma_kernel(trans_a, trans_b)[1, 128, 0, WGMMA_IMAGE + 1024](
        d, cuda.to_device(image), cuda.to_device(c), cuda.to_device(fields))
    assert_close(d.copy_to_host(), a64 @ b64 + c, 1e-6, "wgmma m64n32k16")


def elementwise_kernel(op):
    """out[i] = op(x[i]) over (n,) float32 arrays."""
    @cuda.jit
    def kernel(out, x):
        i = cuda.grid(1)
        if i < x.shape[0]:
            out[i] = op(x[i])
    return kernel


def test_exp2_ftz_is_exp2_with_subnormals_flushed():
    """2^x to ex2.approx's relative error (2^-22, allowed twice that), 0 where 2^x is
    below float32's smallest normal 2^-126 and at -inf, 1 for a subnormal x, inf past
    float32's largest (GELU's exp(-2u) for x below about -10)."""
    rng = np.random.default_rng(5)
    x = rng.uniform(-125.9, 100, 256).astype(np.float32)
    x[:8] = [-np.inf, -126.5, -130.25, -300.0, 1e-40, 0.0, 128.5, 300.0]
    out = cuda.to_device(poisoned(x.size))
    elementwise_kernel(exp2_ftz)[2, 128](out, cuda.to_device(x))
    want = np.exp2(x.astype(np.float64))
    want[want < 2.0**-126] = 0
    want[want > np.finfo(np.float32).max] = np.inf
    np.testing.assert_allclose(out.copy_to_host(), want, rtol=2.0**-21, atol=0)


def test_rcp_approx_is_a_reciprocal():
    """1/x to rcp.approx's relative error (2^-23, allowed twice that), of either sign;
    0 at infinity, inf at 0 and at a subnormal (flushed to 0)."""
    rng = np.random.default_rng(6)
    x = (rng.uniform(0.5, 2, 256) * 2.0 ** rng.integers(-60, 60, 256)
         * rng.choice([-1, 1], 256)).astype(np.float32)
    x[:4] = [np.inf, -np.inf, 0.0, 1e-40]
    out = cuda.to_device(poisoned(x.size))
    elementwise_kernel(rcp_approx)[2, 128](out, cuda.to_device(x))
    got = out.copy_to_host()
    assert got[0] == 0 and got[1] == 0 and got[2] == np.inf and got[3] == np.inf
    np.testing.assert_allclose(got[4:], 1 / x[4:].astype(np.float64), rtol=2.0**-22, atol=0)


@cuda.jit
def cp_async_4_kernel(out, src, src_index, src_bytes):
    # out (n,) float32: thread i copies src's flat element src_index[i] (4 bytes, or none:
    # zero fill) into shared slot i; the block then writes its shared array out
    smem = cuda.shared.array(64, float32)
    i = cuda.threadIdx.x
    cp_async_4(smem, int32(i), src, np.int64(src_index[i]), uint32(src_bytes[i]))
    cp_async_commit()
    wait_all()
    cuda.syncthreads()
    out[i] = smem[i]


@given(seed=SEEDS)
def test_cp_async_4_copies_and_zero_fills(seed):
    rng = np.random.default_rng(seed)
    src = rng.standard_normal((5, 7)).astype(np.float32)   # rows of 28 bytes
    n = 64
    index = rng.integers(0, src.size, n).astype(np.int64)
    size = rng.choice([0, 4], n).astype(np.uint32)
    out = cuda.to_device(poisoned(n))
    cp_async_4_kernel[1, n](out, cuda.to_device(src), cuda.to_device(index),
                            cuda.to_device(size))
    expected = np.where(size > 0, src.reshape(-1)[index], 0).astype(np.float32)
    np.testing.assert_array_equal(out.copy_to_host(), expected)


# The bulk tensor copies: a box of a matrix into shared memory (partly past the matrix's
# edges: zeros there), its bytes completing on an mbarrier that every thread waits on,
# then the box out of shared memory into another matrix (clipped at its edges), written or
# added. The shared layout between the two is the hardware's swizzle, which the wgmma
# tests of the GEMM read; here the round trip, the zeros, the clipping and the barrier.
BOX = (16, 32)      # rows, cols: 64-byte rows of bf16, 128-byte rows of float32


@functools.cache
def tma_kernel(bf16, add):
    store = tma_add_2d if add else tma_store_2d
    size = 2 if bf16 else 4

    @cuda.jit
    def kernel(dst, src, src_map, dst_map, src_at, dst_at):
        raw = cuda.shared.array(0, uint16 if bf16 else float32)
        # a swizzled box starts on a whole 1024-byte pattern
        smem = raw[int32((1024 - shared_address(raw, 0) % 1024) % 1024 // size):]
        bars = cuda.shared.array(1, uint64)
        if cuda.threadIdx.x == 0:
            mbarrier_init(bars, 0, 1)
            fence_barrier_init()
        cuda.syncthreads()
        if cuda.threadIdx.x == 0:
            fence_tensor_map(src_map)
            mbarrier_arrive_expect_tx(bars, 0, BOX[0] * BOX[1] * size)
            tma_load_2d(smem, 0, src, src_map, src_at[1], src_at[0], bars, 0)
        while not mbarrier_try_wait(bars, 0, 0):
            pass
        if cuda.threadIdx.x == 0:
            store(dst, dst_map, dst_at[1], dst_at[0], smem, 0)
            bulk_commit()
            bulk_wait()
    return kernel


@given(seed=SEEDS, pitched=st.booleans())
@pytest.mark.parametrize("dtype, add", [(np.uint16, False), (np.float32, False),
                                        (np.float32, True)])
def test_bulk_tensor_copies_round_trip(seed, pitched, dtype, add):
    """pitched: src and dst are views of some of a wider matrix's columns (their rows lie
    further apart than their widths), which the maps' row pitches describe; the columns
    beside them must come through untouched."""
    rng = np.random.default_rng(seed)
    chunk = 16 // np.dtype(dtype).itemsize
    left, right = (chunk * int(rng.integers(1, 3)), chunk) if pitched else (0, 0)
    src_full = (bf16_bits(rng, 40, left + 48 + right)[0] if dtype == np.uint16
                else rng.standard_normal((40, left + 48 + right)).astype(np.float32))
    dst_full = (rng.standard_normal((24, left + 40 + right)).astype(np.float32) if add
                else poisoned((24, left + 40 + right), dtype))
    src, dst0 = src_full[:, left:left + 48], dst_full[:, left:left + 40]
    src_at = (int(rng.integers(0, 40)), 8 * int(rng.integers(0, 6)))   # row, col (16 B)
    dst_at = (int(rng.integers(0, 24)), 8 * int(rng.integers(0, 5)))
    box = np.zeros(BOX, dtype)
    part = src[src_at[0]: src_at[0] + BOX[0], src_at[1]: src_at[1] + BOX[1]]
    box[:part.shape[0], :part.shape[1]] = part
    expected = dst0.copy()
    view = expected[dst_at[0]: dst_at[0] + BOX[0], dst_at[1]: dst_at[1] + BOX[1]]
    clipped = box[:view.shape[0], :view.shape[1]]
    view[...] = view + clipped if add else clipped
    d_src_full, d_dst_full = cuda.to_device(src_full), cuda.to_device(dst_full)
    d_src, dst = d_src_full[:, left:left + 48], d_dst_full[:, left:left + 40]
    tma_kernel(dtype == np.uint16, add)[1, 64, 0, 1024 + BOX[0] * BOX[1] * 4](
        dst, d_src, tensor_map(d_src, *BOX), tensor_map(dst, *BOX),
        np.array(src_at, np.int32), np.array(dst_at, np.int32))
    got_full = d_dst_full.copy_to_host()
    beside = np.ones(got_full.shape[1], bool)
    beside[left:left + 40] = False
    np.testing.assert_array_equal(np.ascontiguousarray(got_full[:, beside]).view(np.uint8),
                                  np.ascontiguousarray(dst_full[:, beside]).view(np.uint8),
                                  err_msg="a column beside the view was written")
    got = got_full[:, left:left + 40]
    if add:
        assert_close(got, expected, 1e-7, "tma_add_2d")
    else:
        np.testing.assert_array_equal(got.view(np.uint32 if dtype == np.float32 else dtype),
                                      expected.view(np.uint32 if dtype == np.float32 else dtype))


def test_tensor_maps_live_as_long_as_their_matrices():
    """layouts.tensor_maps.tensor_map's cache: a matrix and a box give the same map on every
    call (the one a captured step's launches hold); another box, shape or start on the
    same memory gives another; the maps go with their matrix's memory, so however many
    matrices come and go the cache holds those of the live ones alone. In the simulator a
    map also says which matrix it describes, and a copy through the map of another matrix
    is refused."""
    rng = np.random.default_rng(5)
    before = set(common._kept)
    matrix = cuda.to_device(rng.standard_normal((48, 32)).astype(np.float32))
    views = [matrix, matrix, matrix, matrix.reshape(32, 48), matrix[16:], matrix[:, :28],
             matrix.reshape(96, 16)[::2, :12]]
    boxes = [BOX, BOX, (8, 32), BOX, BOX, BOX, BOX]
    maps = [tensor_map(view, *box) for view, box in zip(views, boxes)]
    assert maps[1] is maps[0]
    assert len({id(m) for m in maps}) == 6, "one map per start, shape, row pitch and box"
    if not ON_GPU:
        assert [[int(word) for word in m[:6]] for m in maps] == [
            [box[1], box[0], view.ctypes.data, *view.shape, view.strides[0]]
            for view, box in zip(views, boxes)]
    for unfit in (matrix[:, ::2], matrix.reshape(-1)[:1530].reshape(102, 15)):
        with pytest.raises(ValueError, match="a tensor map describes one whose rows"):
            tensor_map(unfit, *BOX)
    mine = set(common._kept) - before
    assert len(mine) == 1, "the maps of one allocation's views are kept together"
    for rows in range(16, 216):      # each matrix freed as the next is made
        tensor_map(cuda.device_array((rows, 32), np.float32), *BOX)
    assert set(common._kept) - before == mine, (
        "a live matrix's maps were dropped, or a freed one's kept")
    del matrix, views, maps, unfit
    assert not set(common._kept) & mine, "a freed matrix's maps are kept"
    if not ON_GPU:
        src, dst = (cuda.to_device(rng.standard_normal((48, 32)).astype(np.float32))
                    for _ in range(2))
        with pytest.raises(AssertionError, match="a tensor map of the matrix at"):
            tma_kernel(False, False)[1, 1, 0, 1024 + BOX[0] * BOX[1] * 4](
                dst, src, tensor_map(dst, *BOX), tensor_map(dst, *BOX),
                np.zeros(2, np.int32), np.zeros(2, np.int32))
