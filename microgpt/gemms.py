"""The GEMMs of the model's training step, as the tests and the benchmarks run them."""
from microgpt.activations import head_rows


def step_products(B, T, C, V):
    """(name, M, N, K, transpose_a, transpose_b, epilogue) of every GEMM of a training step
    of a GPT with B x T tokens, width C and vocabulary V (the tests' and the bench's list):
    forward, dX = dY @ W^T and dW += X^T @ dY (float32 gradient, split-K) of the QKV, W_O,
    MLP up and down projections, and the tied LM head, with the outs of the model's bf16
    step: bf16 where a matmul or attention reads the result next, float32 where it joins
    the residual stream (W_O's and MLP down's forward) or its gradient (the dX products
    that feed a LayerNorm's backward); the MLP up forward with the "gelu" epilogue and the
    MLP down dX with "gelu_backward", as the model runs them when GELU is in the
    epilogues. The LM head's run a chunk of rows at a time (activations.head_rows): the shapes
    are a chunk's."""
    N = B * T
    products = []
    for name, n_in, n_out, forward, dx in (("QKV", C, 3 * C, "bf16", "float32"),
                                           ("W_O", C, C, "float32", "bf16"),
                                           ("MLP up", C, 4 * C, "gelu", "float32"),
                                           ("MLP down", 4 * C, C, "float32", "gelu_backward")):
        products += [(f"{name} forward", N, n_out, n_in, False, False, forward),
                     (f"{name} dX", N, n_in, n_out, False, True, dx),
                     (f"{name} dW", n_in, n_out, N, True, False, "accumulate")]
    R = head_rows(N)
    return products + [("LM head forward", R, V, C, False, True, "bf16"),
                       ("LM head dX", R, C, V, False, False, "float32"),
                       ("LM head dW", V, C, R, True, False, "accumulate")]
