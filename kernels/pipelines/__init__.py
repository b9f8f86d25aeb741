"""Pipelines: how the tiles of the steps ahead reach shared memory while a kernel computes.

  multistage   cp.async into `stages` buffers, a commit group a step (the mma.sync GEMM,
               flash attention's three passes)
  tma          the bulk tensor copies into `stages` buffers, full and empty mbarriers with
               their phase parity (the wgmma GEMM)

A kernel picks one, gives it the fill of a step, and keeps only its arithmetic.
"""
