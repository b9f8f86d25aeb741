"""The optimizer on the device: the global gradient norm, the clip and AdamW, fused, and
the schedule of its hyper-parameters.

NumPy twins: ``microgpt.reference.global_norm``, ``clip_scale`` and ``adamw_update``; the
schedule's is ``microgpt.optim.lr_at``.

global_norm_squared reduces the flat gradient to one float on the device
(kernels.reductions). adamw_schedule advances a (4,) device array of hyper-parameters
(microgpt.ops.HPARAMS) to the next update: its number, learning rate (linear warmup, then
cosine decay) and bias corrections. adamw_update is one launch over the model's flat
buffers, four elements a thread on a GPU, each array moved in 16-byte accesses (element
by element where an array does not start on a 16-byte boundary; a grid capped by
max_blocks strides over them): it reads that array and the squared norm, computes the
clip scale min(1, max_norm / (norm + 1e-6)) itself (so the host never waits for the norm),
clips the gradient, updates both moments and the parameter, and applies weight decay to
the elements [0, n_decay) only, which params.ParamLayout fills with the matrices. Nothing
the host passes changes from one step to the next, so a captured step replays as is.

Mixed precision: given param_bf16 (n_decay,), a uint16 array, the same pass also writes the
updated matrices rounded to bf16 there (round to nearest even), the operands of the bf16
GEMMs of the next step: no cast launch, and no second read of the float32 parameters. The
twin is the float32 result rounded by ml_dtypes (NumpyBackend.adamw_update).
"""
import functools
import math

import numpy as np
from numba import cuda, float32, int64, uint16

from . import reductions
from .atoms import load_group4, store_group4, to_bf16
from .common import SIMULATOR, ceil_div, check_array, check_block_size, device_address
from .device import GROUP
from .cache import jit

if SIMULATOR:
    _cos = math.cos
else:
    # cos.approx.f32: libdevice's cosf keeps a local array for range reduction (huge
    # arguments); the schedule's lie in [0, pi], where this is within 2**-21.4 of cos
    from numba.cuda import libdevice
    _cos = libdevice.fast_cosf

CLIP_EPS = np.float32(1e-6)
ONE = np.float32(1.0)
ZERO = np.float32(0.0)
HALF = np.float32(0.5)
PI = np.float32(math.pi)

BLOCK = 256
# No cap on a GPU: one thread per group. The simulator pays ~1 ms per simulated thread
# (a 15,000-parameter model's update was 18 s a step), so there two blocks stride over the
# buffers: the loop that a capped grid takes on a GPU, which the kernel tests draw there.
MAX_BLOCKS = 2 if SIMULATOR else None


# ----------------------------------------------------------------------------------
# kernel

@jit
def _schedule_kernel(hparams, lr, warmup_steps, total_steps, min_lr_ratio, one_minus_beta1,
                     one_minus_beta2):
    # one thread: hparams (4,) from update n to update n + 1; the rest float32 scalars.
    # 1 - beta**step as -expm1(step * log1p(-(1 - beta))): 1 - beta rounded to float32 keeps
    # its relative accuracy, where beta = 0.999 rounded would cost 1e-5 of it
    if cuda.grid(1) != 0:
        return
    step = hparams[0] + ONE
    s = step - ONE                      # lr_at counts steps from 0
    if s < warmup_steps:
        rate = lr * (s + ONE) / warmup_steps
    else:
        span = max(ONE, total_steps - warmup_steps)
        progress = min(ONE, (s - warmup_steps) / span)
        cosine = HALF * (ONE + _cos(PI * progress))
        rate = lr * (min_lr_ratio + (ONE - min_lr_ratio) * cosine)
    hparams[0] = step
    hparams[1] = rate
    hparams[2] = -math.expm1(step * math.log1p(-one_minus_beta1))
    hparams[3] = -math.expm1(step * math.log1p(-one_minus_beta2))


@cuda.jit(device=True, inline=True)
def _adamw_element(g, m, v, p, decay, clip, lr, bias_correction1, bias_correction2, beta1,
                   beta2, eps):
    """(m, v, param) of one element after the step, from its gradient g, moments and
    parameter p; decay the element's weight decay."""
    g = g * clip
    m = beta1 * m + (ONE - beta1) * g
    v = beta2 * v + (ONE - beta2) * g * g
    m_hat = m / bias_correction1
    v_hat = v / bias_correction2
    return m, v, p - lr * (m_hat / (math.sqrt(v_hat) + eps) + decay * p)


@functools.cache
def _adamw_kernel(write_bf16, width):
    """write_bf16: also write the updated matrices, [0, n_decay), rounded to bf16; width:
    the elements of a thread, GROUP (one 16-byte access of each float32 array, 8 bytes of
    the bf16 copy) or 1 (arrays that do not start on a group's boundary)."""
    @cuda.jit(device=True)
    def update_one(i, param, param_bf16, grad, m, v, clip, lr, bias_correction1,
                   bias_correction2, beta1, beta2, eps, weight_decay, n_decay):
        decay = weight_decay if i < n_decay else ZERO
        m[i], v[i], p = _adamw_element(grad[i], m[i], v[i], param[i], decay, clip, lr,
                                       bias_correction1, bias_correction2, beta1, beta2, eps)
        param[i] = p
        if write_bf16 and i < n_decay:
            param_bf16[i] = to_bf16(p)

    @cuda.jit(device=True)
    def update(first, param, param_bf16, grad, m, v, clip, lr, bias_correction1,
               bias_correction2, beta1, beta2, eps, weight_decay, n_decay):
        """Elements [first, first + width) that lie in the buffers: a whole group by
        vector accesses, every load before the first store, or the ragged tail's
        elements one by one."""
        if width == 1 or first + width > param.size:
            for i in range(first, min(first + width, param.size)):
                update_one(i, param, param_bf16, grad, m, v, clip, lr, bias_correction1,
                           bias_correction2, beta1, beta2, eps, weight_decay, n_decay)
            return
        g, m4, v4, p4 = (cuda.local.array(GROUP, float32), cuda.local.array(GROUP, float32),
                         cuda.local.array(GROUP, float32), cuda.local.array(GROUP, float32))
        load_group4(g, 0, grad, first)
        load_group4(m4, 0, m, first)
        load_group4(v4, 0, v, first)
        load_group4(p4, 0, param, first)
        for e in range(GROUP):
            decay = weight_decay if first + e < n_decay else ZERO
            m4[e], v4[e], p4[e] = _adamw_element(g[e], m4[e], v4[e], p4[e], decay, clip, lr,
                                                 bias_correction1, bias_correction2, beta1,
                                                 beta2, eps)
        store_group4(m, first, m4, 0)
        store_group4(v, first, v4, 0)
        store_group4(param, first, p4, 0)
        if write_bf16:
            if first + GROUP <= n_decay:
                store_group4(param_bf16, first, p4, 0)
            else:               # the group that n_decay ends in (param_bf16's last one)
                for e in range(GROUP):
                    if first + e < n_decay:
                        param_bf16[first + e] = to_bf16(p4[e])

    @jit
    def adamw_kernel(param, param_bf16, grad, m, v, norm_squared, hparams, beta1, beta2, eps,
                     weight_decay, n_decay, max_norm):
        # param, grad, m, v (n,); param_bf16 (n_decay,) uint16 when write_bf16 (else a
        # placeholder never touched); norm_squared (1,); hparams (4,); the rest float32
        # scalars, n_decay int64. Thread t takes elements [t width, (t + 1) width).
        lr, bias_correction1, bias_correction2 = hparams[1], hparams[2], hparams[3]
        clip = min(ONE, max_norm / (math.sqrt(norm_squared[0]) + CLIP_EPS))
        first, stride = cuda.grid(1) * width, cuda.gridsize(1) * width
        args = (param, param_bf16, grad, m, v, clip, lr, bias_correction1, bias_correction2,
                beta1, beta2, eps, weight_decay, n_decay)
        if stride >= param.size:
            # a thread per group, a GPU's launch: no loop, whose trip count LLVM computes
            # by a 64-bit division before the first load (a loop there made the update
            # 1.04 -> 1.38 ms at andrea-120m on the H200)
            if first < param.size:
                update(first, *args)
            return
        while first < param.size:       # a capped grid (the simulator's) strides
            update(first, *args)
            first += stride
    return adamw_kernel


_FLAT = float32[::1]
_ADAMW_SCALARS = (_FLAT,) * 5 + (float32,) * 4 + (int64, float32)
PTX_SIGNATURES = [
    (_schedule_kernel, (_FLAT,) + (float32,) * 6),
] + [signature for width in (1, GROUP) for signature in [
    (_adamw_kernel(False, width), (_FLAT, _FLAT) + _ADAMW_SCALARS),
    (_adamw_kernel(True, width), (_FLAT, uint16[::1]) + _ADAMW_SCALARS)]]


# ----------------------------------------------------------------------------------
# launchers

def global_norm_squared(out, grad, *, stream=0, block=reductions.BLOCK):
    """out (1,) = the sum of squares of the flat gradient grad (n,)."""
    reductions.sum_squares_to(out, grad, stream=stream, block=block)


def adamw_schedule(hparams, *, lr, warmup_steps, total_steps, min_lr_ratio, beta1, beta2,
                   stream=0):
    """Advance hparams (4,) = [step, lr, 1 - beta1**step, 1 - beta2**step] to the next
    update: step + 1 and its learning rate by microgpt.optim.lr_at's schedule (linear
    warmup over warmup_steps, cosine decay to min_lr_ratio * lr at total_steps)."""
    check_array("hparams", hparams, (4,))
    if warmup_steps < 0 or total_steps < 1:
        raise ValueError(f"warmup_steps must be >= 0 and total_steps >= 1, got "
                         f"{warmup_steps} and {total_steps}")
    _schedule_kernel[1, 1, stream](hparams, *map(np.float32, (
        lr, warmup_steps, total_steps, min_lr_ratio, 1.0 - beta1, 1.0 - beta2)))


def adamw_update(param, grad, m, v, norm_squared, hparams, *, weight_decay, n_decay,
                 max_norm, beta1, beta2, eps, param_bf16=None, stream=0, block=BLOCK,
                 max_blocks=MAX_BLOCKS):
    """One AdamW step on the flat buffers param, grad, m, v (n,), in place, with the
    learning rate and bias corrections of hparams (4,) (microgpt.ops.HPARAMS). The
    gradient is clipped to max_norm by its norm sqrt(norm_squared[0]), read on the device;
    elements [0, n_decay) are decayed, the rest are not. param_bf16 (n_decay,), when given,
    is a bf16 (uint16) array and receives the updated [0, n_decay) rounded to bf16.
    max_blocks (None: a thread per element) caps the grid, whose threads then stride."""
    check_block_size(block)
    if max_blocks is not None and max_blocks < 1:
        raise ValueError(f"max_blocks must be at least 1 (or None), got {max_blocks}")
    if len(param.shape) != 1:
        raise ValueError(f"param: expected a flat (n,) array, got shape {tuple(param.shape)}")
    n = param.size
    for name, arr in (("param", param), ("grad", grad), ("m", m), ("v", v)):
        check_array(name, arr, (n,))
    check_array("norm_squared", norm_squared, (1,))
    check_array("hparams", hparams, (4,))
    if not 0 <= n_decay <= n:
        raise ValueError(f"n_decay must lie in [0, {n}], got {n_decay}")
    if param_bf16 is not None:
        check_array("param_bf16", param_bf16, (n_decay,), np.uint16)
    if n == 0:
        return
    scalars = (beta1, beta2, eps, weight_decay)
    # groups where every array starts on a group's boundary (a ZeRO-1 shard's view may
    # not); the last group may be short
    width = GROUP if all(device_address(a) % (GROUP * a.dtype.itemsize) == 0 for a in (
        param, grad, m, v) + (() if param_bf16 is None else (param_bf16,))) else 1
    grid = ceil_div(ceil_div(n, width), block)
    grid = grid if max_blocks is None else min(grid, max_blocks)
    _adamw_kernel(param_bf16 is not None, width)[grid, block, stream](
        param, param if param_bf16 is None else param_bf16, grad, m, v, norm_squared,
        hparams, *map(np.float32, scalars), int(n_decay), np.float32(max_norm))
