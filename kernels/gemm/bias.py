"""A GEMM's bias, added to every row of out in the epilogue (GPT-2's linear layers): the
launchers' check of it, and what a launch without one passes in its place.

Every kernel takes a bias argument, read only by its biased variant (a compile-time
flag), so the bias-free kernels are the same code as before the bias existed.
"""
import numpy as np
from numba import cuda

from ..common import check_array, kept_with


def check_bias(bias, N, accumulate):
    """bias, where given: float32 (N,), for a product written (never one accumulated into
    out, nor a split product's parts: the launchers add it once)."""
    if bias is None:
        return
    if accumulate:
        raise ValueError("bias: added to a product written to out, not accumulated into it")
    check_array("bias", bias, (N,))


def unread_bias(out):
    """The stand-in a bias-free launch passes: one float32 kept with out's allocation (a
    captured launch holds its address)."""
    return kept_with(out, ("unread bias",), lambda: cuda.device_array(1, np.float32))
