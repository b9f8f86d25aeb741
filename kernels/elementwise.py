"""Elementwise kernels: the residual add and the tanh-approximated GELU, forward and backward.

NumPy twins: ``microgpt.reference.residual_forward``, ``gelu_forward``, ``gelu_backward``.
The launchers take arrays of any shape (all of one shape, C-contiguous) and run over their
flat views: the residual add one element per thread, GELU four groups (GROUPS) of 4
elements in one vector access each (``precision.group_loader``; single elements where the
arrays do not split into aligned groups), strided by the grid's thread count so that each
of a warp's accesses is coalesced. Every constant is a
float32 so that no float64 arithmetic slips into the kernels.

GELU is computed as x * sigmoid(2u) (the same function: (1 + tanh(u)) / 2 = sigmoid(2u)),
with one ``precision.exp_approx`` and one division where tanh took libdevice's longer
sequence; it also loses nothing to cancellation where 1 + tanh(u) is small (x < 0), and
the backward takes 1 - sigmoid from exp(-2u) where it is small (x > 0).

Mixed precision: every array of the GELU kernels may be float32 or bf16 (uint16 arrays,
``kernels/precision.py``), each on its own, with float32 arithmetic: the forward's output
is the operand of the MLP's projection GEMM and its input the result of the GEMM before
it; the backward's dout is a GEMM result and its dinp the operand of the next two.
"""

import functools

import numpy as np
from numba import cuda, float32, uint16

from .atoms import rcp_approx
from .cache import jit
from .common import ceil_div, check_array, check_block_size
from .precision import GROUP, check_activation, exp_approx, group_loader, group_storer, group_width
from microgpt.reference import GELU_SCALE as _GELU_SCALE

GELU_SCALE = np.float32(_GELU_SCALE)          # sqrt(2 / pi)
GELU_CUBIC = np.float32(0.044715)
GELU_CUBIC_3 = np.float32(3 * 0.044715)       # d/dx of the cubic term's coefficient
HALF = np.float32(0.5)
ONE = np.float32(1.0)
TWO = np.float32(2.0)

BLOCK = 256
# GELU backward's: 10% faster than 256 on the H200 at andrea-120m (99 against 109 us, the
# tuning log of docs/fused-kernels.md)
BACKWARD_BLOCK = 128
# GELU groups per thread (of 1 element, or 4 in one vector access): its loads all
# issued before its first store, so that a thread has 4 loads in flight rather than one
GROUPS = 4


# ----------------------------------------------------------------------------------
# kernels; every array is a flat (n,) view

@jit
def _residual_forward_kernel(out, a, b):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = a[i] + b[i]


@cuda.jit(device=True, inline=True)
def _gate(x):
    """(s, 1 - s, e) for s = sigmoid(2u) = (1 + tanh(u)) / 2, u = sqrt(2/pi) (x + 0.044715
    x^3), and e = exp(-2u): 1 - s is e s where s is near 1 (no cancellation); where e
    overflows (x below about -10) s is 0 and 1 - s is 1."""
    e = exp_approx(-TWO * GELU_SCALE * (x + GELU_CUBIC * x * x * x))
    s = rcp_approx(ONE + e)
    return s, (e * s if s > HALF else ONE - s)


@cuda.jit(device=True, inline=True)
def gelu(x):
    """gelu(x), tanh approximation, in float32 (also the GEMM's GELU epilogue)."""
    s, _ = _gate(x)
    return x * s


@cuda.jit(device=True, inline=True)
def _derivative(x, s, one_minus_s):
    """gelu'(x) = s + 2 x s (1 - s) u'(x), from x's gate."""
    return s + TWO * x * s * one_minus_s * GELU_SCALE * (ONE + GELU_CUBIC_3 * x * x)


@cuda.jit(device=True, inline=True)
def gelu_derivative(x):
    """gelu'(x), in float32 (also the GEMM's GELU epilogue)."""
    s, one_minus_s = _gate(x)
    return _derivative(x, s, one_minus_s)


@functools.cache
def _gelu_kernels(width):
    """(forward, backward) moving elements in groups of width (1, or precision.GROUP in
    one vector access): thread i takes groups i + k * (threads in the grid), k < GROUPS,
    and reads all of them before it computes."""
    load, store = group_loader(width), group_storer(width)
    ELEMENTS = GROUPS * width

    @cuda.jit(device=True, inline=True)
    def group_start(k):
        """The first element of the thread's k-th group; n (or more) past the last."""
        return (cuda.grid(1) + k * cuda.gridsize(1)) * width

    @jit
    def gelu_forward_kernel(out, inp):
        # out, inp: float32 or bf16 each
        x = cuda.local.array(ELEMENTS, float32)
        for k in range(GROUPS):
            if group_start(k) < out.size:
                load(x, k * width, inp, group_start(k))
        for k in range(GROUPS):
            if group_start(k) < out.size:
                for e in range(width):
                    x[k * width + e] = gelu(x[k * width + e])
                store(out, group_start(k), x, k * width)

    @cuda.jit(device=True, inline=True)
    def backward(dinp, act, dout, inp, keep):
        # dinp may be dout itself: a thread reads its dout elements before it writes them;
        # keep (a constant): act = gelu(inp) too, from the same gate as the derivative
        x = cuda.local.array(ELEMENTS, float32)
        dy = cuda.local.array(ELEMENTS, float32)
        for k in range(GROUPS):
            if group_start(k) < dinp.size:
                load(x, k * width, inp, group_start(k))
                load(dy, k * width, dout, group_start(k))
        for k in range(GROUPS):
            if group_start(k) < dinp.size:
                for e in range(width):
                    s, one_minus_s = _gate(x[k * width + e])
                    dy[k * width + e] *= _derivative(x[k * width + e], s, one_minus_s)
                    x[k * width + e] *= s
                store(dinp, group_start(k), dy, k * width)
                if keep:
                    store(act, group_start(k), x, k * width)

    @jit
    def gelu_backward_kernel(dinp, dout, inp):
        # dinp, dout, inp: float32 or bf16 each
        backward(dinp, dinp, dout, inp, False)

    @jit
    def gelu_backward_keeping_kernel(dinp, act, dout, inp):
        backward(dinp, act, dout, inp, True)

    return gelu_forward_kernel, gelu_backward_kernel, gelu_backward_keeping_kernel


_F32, _BF16 = float32[::1], uint16[::1]
PTX_SIGNATURES = [(_residual_forward_kernel, (_F32, _F32, _F32))] + [
    signature for width in (1, GROUP) for signature in [
        (_gelu_kernels(width)[0], (_F32, _F32)),
        (_gelu_kernels(width)[0], (_BF16, _F32)),           # the GEMM wrote float32
        (_gelu_kernels(width)[0], (_BF16, _BF16)),
        (_gelu_kernels(width)[1], (_F32, _F32, _F32)),
        (_gelu_kernels(width)[1], (_BF16, _BF16, _BF16)),
        (_gelu_kernels(width)[2], (_F32, _F32, _F32, _F32)),
        (_gelu_kernels(width)[2], (_BF16, _BF16, _BF16, _BF16))]]


# ----------------------------------------------------------------------------------
# launchers

def _launch_flat(kernel, arrays, names, stream, block, bf16=False, groups=None):
    """Check that every array has the first one's shape (and is float32, or also bf16
    where bf16), then run kernel over flat views: an element a thread, or, given groups,
    that many groups a thread, kernel(width) the kernel of the arrays' group width."""
    check_block_size(block)
    shape = arrays[0].shape
    for name, arr in zip(names, arrays):
        if bf16:
            check_activation(name, arr, shape)
        else:
            check_array(name, arr, shape)
    n = arrays[0].size
    if n:
        width = group_width(n, *arrays) if groups else 1
        kernel = kernel(width) if groups else kernel
        kernel[ceil_div(n, block * (groups or 1) * width), block, stream](
            *(arr.reshape(n) for arr in arrays))


def residual_forward(out, a, b, *, stream=0, block=BLOCK):
    """out = a + b, all of one shape."""
    _launch_flat(_residual_forward_kernel, (out, a, b), ("out", "a", "b"), stream, block)


def gelu_forward(out, inp, *, stream=0, block=BLOCK):
    """out = gelu(inp), tanh approximation, both of one shape, each float32 or bf16."""
    _launch_flat(lambda width: _gelu_kernels(width)[0], (out, inp), ("out", "inp"), stream,
                 block, bf16=True, groups=GROUPS)


def gelu_backward(dinp, dout, inp, act=None, *, stream=0, block=BACKWARD_BLOCK):
    """dinp = dout * gelu'(inp), each float32 or bf16; dinp may be the same array as dout
    (in place). act, when given: = gelu(inp) too (the forward's output, recomputed where
    it was not kept: a write, where a GELU forward pass would read inp again)."""
    if act is None:
        _launch_flat(lambda width: _gelu_kernels(width)[1], (dinp, dout, inp),
                     ("dinp", "dout", "inp"), stream, block, bf16=True, groups=GROUPS)
    else:
        _launch_flat(lambda width: _gelu_kernels(width)[2], (dinp, act, dout, inp),
                     ("dinp", "act", "dout", "inp"), stream, block, bf16=True, groups=GROUPS)
