"""pytest -p unroll_plugin (this folder on PYTHONPATH): the skinny bf16 products at
$MMA_UNROLL k-blocks a warp loads at once, in every process of the run (xdist's too)."""
import os

from microgpt.kernels.gemm import skinny

skinny.MMA_UNROLL = int(os.environ["MMA_UNROLL"])
