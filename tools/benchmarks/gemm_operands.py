"""Operands for timing one GEMM of a step (gemms.step_products' rows) on the GPU: bf16
matrices drawn by torch on the device (the LM head's (16384, 50304) took NumPy seconds),
shared with numba as uint16 views, and torch's own views of them to check the product
against."""
import numpy as np


def operands(M, N, K, transpose_a, transpose_b, epilogue, gen):
    """-> (a, b, out, lhs, rhs): a and b numba's uint16 views of bf16 normal draws from
    gen (a torch.Generator on the GPU; a (K, M) when transpose_a, else (M, K); b (N, K)
    when transpose_b, else (K, N)), out a numba (M, N) array (float32 for the
    "accumulate" and "float32" epilogues, else bf16), unwritten; lhs @ rhs in torch is the
    product."""
    import torch
    from numba import cuda

    a = torch.randn((K, M) if transpose_a else (M, K), device="cuda", generator=gen).bfloat16()
    b = torch.randn((N, K) if transpose_b else (K, N), device="cuda", generator=gen).bfloat16()
    bf16_out = epilogue not in ("accumulate", "float32")
    # (through int16, which every torch's array interface names)
    return (cuda.as_cuda_array(a.view(torch.int16)).view(np.uint16),
            cuda.as_cuda_array(b.view(torch.int16)).view(np.uint16),
            cuda.device_array((M, N), np.uint16 if bf16_out else np.float32),
            a.T if transpose_a else a, b.T if transpose_b else b)


def as_float(out):
    """A numba float32 or bf16 (uint16) device array as a float32 torch tensor."""
    import torch

    t = torch.as_tensor(out.view(np.int16) if out.dtype == np.uint16 else out, device="cuda")
    return t.view(torch.bfloat16).float() if out.dtype == np.uint16 else t
