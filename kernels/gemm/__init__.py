"""GEMM: out (M, N) = op(a) @ op(b), the one op behind every matmul of the model.

NumPy twins: ``microgpt.reference.matmul_forward`` / ``matmul_backward`` (and
``NumpyBackend.matmul``, whose signature ``matmul`` mirrors). ``matmul`` routes by dtype:
float32 operands to the CUDA cores' kernel (``gemm.fp32``), bf16 ones (uint16 arrays) to
the tensor cores (``gemm.bf16``, which routes by architecture: ``gemm.wgmma`` on Hopper,
``gemm.mma_sync`` otherwise, with the tiles and splits of ``gemm.tuning``); the
mixed-precision step calls the same op. ``matmul_gelu_forward`` and
``matmul_gelu_backward`` are the MLP's products with the GELU beside them.

  fp32       the float32 kernel (GemmTile)
  bf16       the tensor-core launcher, matmul_bf16: checks, tile, split-K, epilogue
  tiles      MmaTile, WgmmaTile and their checks, the epilogues
  tuning     the H200's policy: the named tiles, which a product takes, split-K
  mma_sync   the mma.sync kernel (sm_80+)
  wgmma      the wgmma kernel with bulk tensor copies (sm_90a)
"""
import numpy as np

from .. import elementwise, reductions
from ..common import check_array
from . import bf16, fp32, skinny
from .tuning import wgmma_takes


def matmul(out, a, b, transpose_a=False, transpose_b=False, accumulate=False, bias=None, *,
           tile=None, split_k=None, deterministic=False, stream=0):
    """out (M, N) = op(a) @ op(b) (+ bias (N,) on every row, in the epilogue: GPT-2's
    linear layers), op transposing when asked; += when accumulate (then without a bias).

    a is (M, K), or (K, M) when transpose_a; b is (K, N), or (N, K) when transpose_b; each
    a matrix or a view of some of a wider one's columns. float32 operands take
    ``fp32.matmul`` (tile, a GemmTile, overrides its shape-based default; it never splits
    K); bf16 operands (uint16 arrays) go to the tensor cores, ``bf16.matmul_bf16`` with
    its own defaults, or split_k (1: no split-K), and deterministic (split-K's blocks add
    their parts in the order of their splits, not by float atomics in the order they
    finish: the same bits every run). By default (no tile,
    split_k None or 1) a product of at most skinny.ROWS rows (a decoding step's) goes to
    ``skinny``, which reads the weights at the memory's rate (its splits of K are added in
    a fixed order: the same bits every run); a product with a bias does not (skinny has no
    bias epilogue)."""
    if (tile is None and split_k in (None, 1) and bias is None
            and skinny.takes(out, a, b, transpose_a, accumulate)):
        return skinny.skinny_matmul(out, a, b, transpose_b, stream=stream)
    if a.dtype == np.uint16 or b.dtype == np.uint16:
        if tile is not None:
            raise ValueError("tile: a GemmTile is the float32 kernel's; bf16 operands take "
                             "gemm.bf16's tiles (call gemm.bf16.matmul_bf16 to choose one)")
        return bf16.matmul_bf16(out, a, b, transpose_a, transpose_b, accumulate, bias,
                                split_k=split_k, deterministic=deterministic, stream=stream)
    if split_k not in (None, 1):
        raise ValueError(f"split_k={split_k}: the float32 kernel does not split K")
    fp32.matmul(out, a, b, transpose_a, transpose_b, accumulate, bias, tile=tile,
                stream=stream)


# Whether the bf16 MLP GEMMs compute GELU in their epilogues (gemm.bf16's "gelu", the up
# projection's forward, and "gelu_backward", the down projection's dX) rather than the
# GEMM then a GELU kernel. Measured on the H200 at andrea-120m with the wgmma kernel, each
# product captured in a CUDA graph and in the step's profile (docs/gemm-bf16.md, tuning
# log row 7; tools/bench.py --only fused times both): the fused products are slower,
# 0.230 against 0.190 ms forward and 0.244 against 0.228 backward, because the wgmma
# kernel's epilogue does not overlap the next tile's products (8 warps an SM wait on
# GELU's exponentials), while the GELU kernels run at the memory's rate. The forward's
# epilogue is the persistent kernel's too since session 21, which turned it around (row
# 21; each captured beside the product and the GELU kernel, one process): andrea-120m's
# 0.1593 -> 0.1448 ms, andrea-12m's 0.0603 -> 0.0532. The backward's in the persistent
# kernel (session 21, and again in session 22 with its loads of pre overlapped) stayed
# slower than the product and the GELU kernel, 0.2011 against 0.1964 ms (row 24), and is
# gone: the backward's epilogue is the wgmma kernel's alone.
GELU_FORWARD_IN_EPILOGUE = True
GELU_BACKWARD_IN_EPILOGUE = False


def _gelu_in_epilogue(fused, default, a, *matrices):
    """Whether GELU goes into the GEMM's epilogue: asked for (fused; by default the
    direction's switch above), and a product the wgmma kernel runs (bf16 on sm_90a,
    matrices the bulk copies take, a K to multiply over: a is the (M, K) operand)."""
    return ((default if fused is None else fused) and a.dtype == np.uint16
            and a.shape[1] > 0 and wgmma_takes(a, *matrices))


def matmul_gelu_forward(out, pre, a, b, bias=None, *, fused=None, stream=0):
    """The MLP's up projection and its GELU: pre (M, N) = a @ b (+ bias (N,), in the
    GEMM's epilogue), out = gelu(pre) (the backward reads pre). fused (default
    GELU_FORWARD_IN_EPILOGUE, without a bias), where the wgmma kernel runs the product: one GEMM whose
    epilogue writes both (gemm.bf16); otherwise the GEMM, then ``elementwise.gelu_forward``.
    By default (fused None) at most skinny.ROWS rows without a bias go to ``skinny``, its
    GELU epilogue."""
    if fused is None and bias is None and skinny.takes(out, a, b, False, False, pre):
        return skinny.skinny_matmul(out, a, b, gelu_pre=pre, stream=stream)
    # (by default not with a bias: the product then stays the wgmma kernel's, whose GELU
    # epilogue is the slower way)
    if _gelu_in_epilogue(fused, GELU_FORWARD_IN_EPILOGUE and bias is None, a, b, out, pre):
        return bf16.matmul_bf16(out, a, b, bias=bias, gelu="forward", pre=pre, stream=stream)
    matmul(pre, a, b, bias=bias, stream=stream)
    elementwise.gelu_forward(out, pre, stream=stream)


def matmul_gelu_backward(dpre, dout, b, pre, dbias=None, act=None, *, fused=None, stream=0):
    """The gradient through the MLP's down projection and its GELU: dpre (M, N) =
    (dout @ b^T) * gelu'(pre), b (N, K) the down projection's weight; dbias (N,), when
    given, += dpre's column sums (the up projection's bias's gradient); act (M, N), when
    given, = gelu(pre) (the down projection's dW operand, which the forward did not keep).
    fused (default GELU_BACKWARD_IN_EPILOGUE), where the wgmma kernel runs the product:
    one GEMM whose epilogue reads pre (gemm.bf16), then any dbias by
    ``reductions.bias_backward`` and any act by ``elementwise.gelu_forward``; otherwise
    the GEMM into dpre, then ``elementwise.gelu_backward`` in place (writing act too), or
    with a dbias ``reductions.gelu_bias_backward``, which sums dpre as it writes it (and
    then the GELU forward for act)."""
    if dbias is not None:
        check_array("dbias", dbias, (dpre.shape[1],))
    if _gelu_in_epilogue(fused, GELU_BACKWARD_IN_EPILOGUE, dout, b, dpre, pre):
        bf16.matmul_bf16(dpre, dout, b, transpose_b=True, gelu="backward", pre=pre,
                         stream=stream)
        if dbias is not None:
            reductions.bias_backward(dbias, dpre, stream=stream)
    else:
        matmul(dpre, dout, b, transpose_b=True, stream=stream)
        if dbias is None:
            elementwise.gelu_backward(dpre, dpre, pre, act, stream=stream)
            return
        reductions.gelu_bias_backward(dpre, dbias, dpre, pre, stream=stream)
    if act is not None:
        elementwise.gelu_forward(act, pre, stream=stream)
