"""The optimizer on the device: the global gradient norm, the clip and AdamW, fused, and
the schedule of its hyper-parameters.

NumPy twins: ``microgpt.reference.global_norm``, ``clip_scale`` and ``adamw_update``; the
schedule's is ``microgpt.optim.lr_at``.

global_norm_squared reduces the flat gradient to one float on the device
(kernels.reductions). adamw_schedule advances a (4,) device array of hyper-parameters
(microgpt.ops.HPARAMS) to the next update: its number, learning rate (linear warmup, then
cosine decay) and bias corrections. adamw_update is one launch over the model's flat
buffers, one thread per element on a GPU (a grid capped by max_blocks strides over them):
it reads that array and the squared norm, computes the
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
from .common import SIMULATOR, ceil_div, check_array, check_block_size
from .atoms import to_bf16
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
# No cap on a GPU: one thread per element. The simulator pays ~1 ms per simulated thread
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


@functools.cache
def _adamw_kernel(write_bf16):
    """write_bf16: also write the updated matrices, [0, n_decay), rounded to bf16."""
    @cuda.jit(device=True)
    def update(i, param, param_bf16, grad, m, v, clip, lr, bias_correction1,
               bias_correction2, beta1, beta2, eps, weight_decay, n_decay):
        g = grad[i] * clip
        m_i = beta1 * m[i] + (ONE - beta1) * g
        v_i = beta2 * v[i] + (ONE - beta2) * g * g
        m[i] = m_i
        v[i] = v_i
        m_hat = m_i / bias_correction1
        v_hat = v_i / bias_correction2
        decay = weight_decay if i < n_decay else ZERO
        p = param[i]
        p = p - lr * (m_hat / (math.sqrt(v_hat) + eps) + decay * p)
        param[i] = p
        if write_bf16 and i < n_decay:
            param_bf16[i] = to_bf16(p)

    @jit
    def adamw_kernel(param, param_bf16, grad, m, v, norm_squared, hparams, beta1, beta2, eps,
                     weight_decay, n_decay, max_norm):
        # param, grad, m, v (n,); param_bf16 (n_decay,) uint16 when write_bf16 (else a
        # placeholder never touched); norm_squared (1,); hparams (4,); the rest float32
        # scalars, n_decay int64
        lr, bias_correction1, bias_correction2 = hparams[1], hparams[2], hparams[3]
        clip = min(ONE, max_norm / (math.sqrt(norm_squared[0]) + CLIP_EPS))
        i, stride = cuda.grid(1), cuda.gridsize(1)
        args = (param, param_bf16, grad, m, v, clip, lr, bias_correction1, bias_correction2,
                beta1, beta2, eps, weight_decay, n_decay)
        if stride >= param.size:
            # a thread per element, a GPU's launch: no loop, whose trip count LLVM computes
            # by a 64-bit division before the first load (a loop there made the update
            # 1.04 -> 1.38 ms at andrea-120m on the H200)
            if i < param.size:
                update(i, *args)
            return
        while i < param.size:           # a capped grid (the simulator's) strides
            update(i, *args)
            i += stride
    return adamw_kernel


_FLAT = float32[::1]
_ADAMW_SCALARS = (_FLAT,) * 5 + (float32,) * 4 + (int64, float32)
PTX_SIGNATURES = [
    (_schedule_kernel, (_FLAT,) + (float32,) * 6),
    (_adamw_kernel(False), (_FLAT, _FLAT) + _ADAMW_SCALARS),
    (_adamw_kernel(True), (_FLAT, uint16[::1]) + _ADAMW_SCALARS),
]


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
    grid = ceil_div(n, block) if max_blocks is None else min(ceil_div(n, block), max_blocks)
    _adamw_kernel(param_bf16 is not None)[grid, block, stream](
        param, param if param_bf16 is None else param_bf16, grad, m, v, norm_squared,
        hparams, *map(np.float32, scalars), int(n_decay), np.float32(max_norm))
