"""The op set, declared once: what a backend must provide for the model to run on it.

Each op takes its outputs first, then its inputs, and writes into buffers allocated once
(``microgpt.step``); gradient outputs of parameters (dweight, dbias, dwte, ...) and ``dinp``
of ``layernorm_backward`` accumulate (+=), every other output is overwritten.

OPS maps each op to the module of ``microgpt.kernels`` whose launcher of the same name runs
it on the GPU: ``CudaBackend`` is built from this table, ``NumpyBackend`` (the reference)
is checked against it, and so are the compile check, the kernel tests and the bench rows
(tests/test_ops.py). MEMORY is the rest of a backend: buffers and the copies in and out.
"""
OPS = {
    "encoder_forward": "embedding",
    "encoder_backward": "embedding",
    "layernorm_forward": "layernorm",
    "residual_layernorm_forward": "layernorm",
    "layernorm_backward": "layernorm",
    "matmul": "gemm",
    "matmul_gelu_forward": "gemm",
    "matmul_gelu_backward": "gemm",
    "bias_backward": "reductions",
    "split_heads_forward": "attention.heads",
    "split_heads_backward": "attention.heads",
    "merge_heads_forward": "attention.heads",
    "merge_heads_backward": "attention.heads",
    "attention_forward": "attention",
    "attention_backward": "attention",
    "residual_forward": "elementwise",
    "gelu_forward": "elementwise",
    "gelu_backward": "elementwise",
    "crossentropy_forward": "crossentropy",
    "crossentropy_forward_backward": "crossentropy",
    "global_norm_squared": "adamw",
    "adamw_schedule": "adamw",
    "adamw_update": "adamw",
    "record_step": "reductions",
    # generation: a decoding batch and its KV cache (microgpt.generate)
    "decode_embedding": "attention.decode",
    "kv_cache_write": "attention.decode",
    "attention_decode": "attention.decode",
    "sample_tokens": "sampling",
}

MEMORY = ("zeros", "to_device", "to_host", "copy", "fill_zero", "synchronize", "join",
          "mean", "heads_view", "host_buffer", "fetch")

# hyper-parameters of the next AdamW update, a (4,) float32 device array written by
# adamw_schedule and read by adamw_update, so that a captured step never changes its
# arguments: the update's number (counting from 1; exact in float32 up to 2**24), its
# learning rate, and Adam's bias corrections 1 - beta1**step and 1 - beta2**step
HPARAMS = ("step", "lr", "bias_correction1", "bias_correction2")
# a row of the metrics log that record_step writes for each step
LOG_COLUMNS = ("loss", "grad_norm", "lr")
