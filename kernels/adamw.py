"""The optimizer on the device: the global gradient norm, the clip and AdamW, fused.

NumPy twins: ``microgpt.reference.global_norm``, ``clip_scale`` and ``adamw_update``.

global_norm_squared reduces the flat gradient to one float on the device
(kernels.reductions). adamw_update is one launch over the model's flat buffers, one thread
per element: it reads that float, computes the clip scale min(1, max_norm / (norm + 1e-6))
itself (so the host never waits for the norm), clips the gradient, updates both moments
and the parameter, and applies weight decay to the elements [0, n_decay) only, which
model.ParamLayout fills with the matrices.
"""
import math

import numpy as np
from numba import cuda, float32, int64

from microgpt.kernels import reductions
from microgpt.kernels.common import ceil_div, check_array, check_block_size

CLIP_EPS = np.float32(1e-6)
ONE = np.float32(1.0)
ZERO = np.float32(0.0)

BLOCK = 256


# ----------------------------------------------------------------------------------
# kernel

@cuda.jit
def _adamw_kernel(param, grad, m, v, norm_squared, lr, beta1, beta2, eps, weight_decay,
                  n_decay, max_norm, bias_correction1, bias_correction2):
    # param, grad, m, v (n,); norm_squared (1,); the rest float32 scalars, n_decay int64
    i = cuda.grid(1)
    if i >= param.size:
        return
    clip = min(ONE, max_norm / (math.sqrt(norm_squared[0]) + CLIP_EPS))
    g = grad[i] * clip
    m_i = beta1 * m[i] + (ONE - beta1) * g
    v_i = beta2 * v[i] + (ONE - beta2) * g * g
    m[i] = m_i
    v[i] = v_i
    m_hat = m_i / bias_correction1
    v_hat = v_i / bias_correction2
    decay = weight_decay if i < n_decay else ZERO
    p = param[i]
    param[i] = p - lr * (m_hat / (math.sqrt(v_hat) + eps) + decay * p)


PTX_SIGNATURES = [
    (_adamw_kernel, (float32[::1],) * 5 + (float32,) * 5 + (int64,) + (float32,) * 3),
]


# ----------------------------------------------------------------------------------
# launchers

def global_norm_squared(out, grad, *, stream=0, block=reductions.BLOCK):
    """out (1,) = the sum of squares of the flat gradient grad (n,)."""
    reductions.sum_squares_to(out, grad, stream=stream, block=block)


def adamw_update(param, grad, m, v, norm_squared, *, lr, step, weight_decay, n_decay,
                 max_norm, beta1, beta2, eps, stream=0, block=BLOCK):
    """One AdamW step on the flat buffers param, grad, m, v (n,), in place; step counts
    from 1. The gradient is clipped to max_norm by its norm sqrt(norm_squared[0]), read
    on the device; elements [0, n_decay) are decayed, the rest are not."""
    check_block_size(block)
    if len(param.shape) != 1:
        raise ValueError(f"param: expected a flat (n,) array, got shape {tuple(param.shape)}")
    n = param.size
    for name, arr in (("param", param), ("grad", grad), ("m", m), ("v", v)):
        check_array(name, arr, (n,))
    check_array("norm_squared", norm_squared, (1,))
    if step < 1:
        raise ValueError(f"step counts from 1, got {step}")
    if not 0 <= n_decay <= n:
        raise ValueError(f"n_decay must lie in [0, {n}], got {n_decay}")
    if n == 0:
        return
    # the bias corrections are host scalars, computed in float64 like the reference's
    bias_correction1 = 1.0 - beta1 ** step
    bias_correction2 = 1.0 - beta2 ** step
    scalars = (lr, beta1, beta2, eps, weight_decay)
    _adamw_kernel[ceil_div(n, block), block, stream](
        param, grad, m, v, norm_squared, *map(np.float32, scalars), int(n_decay),
        np.float32(max_norm), np.float32(bias_correction1), np.float32(bias_correction2))
