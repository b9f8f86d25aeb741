"""numba.cuda kernels, installed as ``microgpt.kernels``; the NumPy twin of ``<op>_forward``
here is ``microgpt.reference.<op>_forward``. Importing this package compiles nothing.

The layers, each built on the ones above it:
  device       the hardware's limits and shapes (threads, shared memory, SMs, warps, mma
               tiles, swizzle modes) and the driver opt-in for more shared memory
  common       launch checks, ceil_div, block reductions
  atoms/       single PTX instructions (mma.sync, ldmatrix, cp.async, wgmma, mbarriers,
               TMA, ...): atoms/gpu/ on the GPU, their twins in atoms/simulator.py
  precision    activations in float32 or bf16, element by element or in vector groups
  layouts/     shared-memory tiles and their swizzles, mma fragments and the accumulators'
               maps, tensor maps
  pipelines/   the tiles of the steps ahead into shared memory: multistage cp.async, and
               TMA with full and empty mbarriers
  op families, one per op of microgpt.ops, each kernel beside its backward and launcher:
    gemm/        matmul, routed by dtype and architecture: fp32, bf16 (mma_sync, wgmma),
                 the tile types and the H200 tuning policy
    attention/   causal attention routed by dtype (fp32, flash), the head split and
                 merge, the KV cache
    adamw, crossentropy, elementwise, embedding, layernorm, reductions
  cache        compiled kernels kept on disk across runs
"""
