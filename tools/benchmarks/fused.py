"""The fused kernels of mixed precision against the unfused launches they replace, and
against PyTorch where it does the same work (the cross-entropy forward + backward on bf16
logits, fused AdamW), beside the device's copy: the rate a memory-bound kernel's GB/s
compares with."""

import numpy as np

from .timing import cuda_time, torch_time


def bench_fused(reps, shape=(16, 1024, 768, 50304), n_params=124_392_960):
    """(name, ms, the unfused launches' ms or None, bytes each must move, PyTorch's ms or
    None) at shape (B, T, C, V) and n_params, andrea-120m's (heads of 64). bf16 arrays are
    uint16 device arrays. The bf16 head copies and AdamW's bf16 matrices replace no
    launch: beside them, the same launch in float32 (in the unfused column)."""
    import torch
    import torch.nn.functional as F
    from numba import cuda

    from microgpt.kernels import adamw, crossentropy, elementwise, gemm, layernorm
    from microgpt.kernels.attention import heads

    import ml_dtypes

    B, T, C, V = shape
    N = B * T
    rng = np.random.default_rng(0)

    def dev(*dims, scale=1.0, bf16=False):
        """Random rows on the device: 256 drawn rows repeated (drawing all 824M logits
        would take the host longer than the whole benchmark)."""
        block = rng.standard_normal((min(dims[0], 256),) + dims[1:], dtype=np.float32) * scale
        if bf16:
            block = block.astype(ml_dtypes.bfloat16).view(np.uint16)
        return cuda.to_device(np.resize(block, dims))

    def dev_bf16(*dims, scale=1.0):
        return dev(*dims, scale=scale, bf16=True)

    a, b, resid, ln_out, dln, dresid = (dev(N, C) for _ in range(6))
    ln_out16, dln16, dresid16 = dev_bf16(N, C), dev_bf16(N, C), dev_bf16(N, C)
    w, bias, mean, rstd, dw, db = dev(C), dev(C), dev(N), dev(N), dev(C), dev(C)
    logits, losses, lse = dev(N, V, scale=2.0), dev(N), dev(N)
    logits16 = dev_bf16(N, V, scale=2.0)
    targets = cuda.to_device(rng.integers(0, V, N).astype(np.int32))
    fc, fc_out, fc16, fc_out16 = (dev(N, 4 * C), dev(N, 4 * C), dev_bf16(N, 4 * C),
                                  dev_bf16(N, 4 * C))
    w_fc16, w_proj16 = dev_bf16(C, 4 * C, scale=0.02), dev_bf16(4 * C, C, scale=0.02)
    per_head = (B, C // 64, T, 64)
    qkv, qkv16 = dev(B, T, 3 * C), dev_bf16(B, T, 3 * C)
    q, k, v = (dev(*per_head) for _ in range(3))
    q16, k16, v16 = (dev_bf16(*per_head) for _ in range(3))
    merged, merged16 = dev(B, T, C), dev_bf16(B, T, C)
    # every parameter but the LayerNorm vectors (4 per layer and ln_f's 2, at 12 layers) is a
    # matrix, decayed and copied to bf16
    n_decay = n_params - 50 * C
    param, grad, m_flat = (dev(n_params, scale=0.02) for _ in range(3))
    v_flat = cuda.to_device(np.full(n_params, 1e-4, np.float32))
    norm_squared = cuda.to_device(np.ones(1, np.float32))
    hparams = cuda.to_device(np.array([1, 1e-4, 0.1, 0.05], np.float32))
    param16 = cuda.to_device(np.zeros(n_decay, np.uint16))
    f32, bf16 = 4, 2
    nc, nv, nf = N * C, N * V, N * 4 * C

    def adamw_update(**bf16_copy):
        adamw.adamw_update(param, grad, m_flat, v_flat, norm_squared, hparams, weight_decay=0.1,
                           n_decay=n_decay, max_norm=1.0, beta1=0.9, beta2=0.95, eps=1e-8,
                           **bf16_copy)

    def residual_pair():
        elementwise.residual_forward(resid, a, b)
        layernorm.layernorm_forward(ln_out, mean, rstd, resid, w, bias)

    copy_from, copy_to = dev(N, V // 2), dev(N, V // 2)     # a bf16 logits' bytes
    tlogits16 = torch.randn(N, V, device="cuda", dtype=torch.bfloat16).requires_grad_()
    ttargets = torch.randint(0, V, (N,), device="cuda")
    tparam = torch.nn.Parameter(torch.randn(n_params, device="cuda") * 0.02)
    tparam.grad = torch.randn_like(tparam) * 0.02
    topt = torch.optim.AdamW([tparam], lr=1e-4, betas=(0.9, 0.95), eps=1e-8,
                             weight_decay=0.1, fused=True)
    tcopy_from, tcopy_to = (torch.empty(N * V // 2, device="cuda") for _ in range(2))

    def torch_crossentropy():
        tlogits16.grad = None       # written afresh, as microgpt's dlogits (not accumulated)
        F.cross_entropy(tlogits16, ttargets).backward()

    def crossentropy_pair():
        crossentropy.crossentropy_forward(losses, lse, logits, targets)
        crossentropy.crossentropy_backward(logits, logits, lse, targets, 1.0 / N)

    rows = [
        ("device-to-device copy, 1.65 GB", lambda: copy_to.copy_to_device(copy_from), None,
         2 * nv * bf16, lambda: tcopy_to.copy_(tcopy_from)),
        ("residual + layernorm forward, float32 out",
         lambda: layernorm.residual_layernorm_forward(resid, ln_out, mean, rstd, a, b, w, bias),
         residual_pair, nc * 4 * f32),
        ("residual + layernorm forward, bf16 out",
         lambda: layernorm.residual_layernorm_forward(resid, ln_out16, mean, rstd, a, b, w,
                                                      bias),
         residual_pair, nc * (3 * f32 + bf16)),
        ("layernorm backward, float32 dout",
         lambda: layernorm.layernorm_backward(dresid, dw, db, dln, resid, w, mean, rstd),
         None, nc * 4 * f32),
        ("layernorm backward, bf16 dout + bf16 copy of dinp",
         lambda: layernorm.layernorm_backward(dresid, dw, db, dln16, resid, w, mean, rstd,
                                              dinp_copy=dresid16),
         None, nc * (3 * f32 + 2 * bf16)),
        ("crossentropy forward + backward, float32 logits",
         lambda: crossentropy.crossentropy_forward_backward(losses, logits, targets, 1.0 / N),
         crossentropy_pair, nv * 2 * f32),
        ("crossentropy forward + backward, bf16 logits",
         lambda: crossentropy.crossentropy_forward_backward(losses, logits16, targets, 1.0 / N),
         crossentropy_pair, nv * 2 * bf16, torch_crossentropy),
        ("crossentropy forward + backward, bf16 logits, read twice (stage=False)",
         lambda: crossentropy.crossentropy_forward_backward(losses, logits16, targets, 1.0 / N,
                                                            stage=False),
         None, nv * 2 * bf16),
        ("gelu forward, float32 -> float32", lambda: elementwise.gelu_forward(fc_out, fc), None,
         nf * 2 * f32),
        ("gelu forward, float32 -> bf16", lambda: elementwise.gelu_forward(fc_out16, fc), None,
         nf * (f32 + bf16)),
        ("gelu forward, bf16 -> bf16", lambda: elementwise.gelu_forward(fc_out16, fc16), None,
         nf * 2 * bf16),
        ("gelu backward in place, float32", lambda: elementwise.gelu_backward(fc_out, fc_out, fc),
         None, nf * 3 * f32),
        ("gelu backward in place, bf16",
         lambda: elementwise.gelu_backward(fc_out16, fc_out16, fc16), None, nf * 3 * bf16),
        ("MLP up GEMM, GELU in its epilogue (bf16)",
         lambda: gemm.matmul_gelu_forward(fc_out16, fc16, ln_out16, w_fc16, fused=True),
         lambda: gemm.matmul_gelu_forward(fc_out16, fc16, ln_out16, w_fc16, fused=False),
         (nc + 4 * C * C + 2 * nf) * bf16),
        ("MLP down dX GEMM, GELU backward in its epilogue (bf16)",
         lambda: gemm.matmul_gelu_backward(fc_out16, dln16, w_proj16, fc16, fused=True),
         lambda: gemm.matmul_gelu_backward(fc_out16, dln16, w_proj16, fc16, fused=False),
         (nc + 4 * C * C + 2 * nf) * bf16),
        ("split heads, float32 qkv -> bf16 q, k, v",
         lambda: heads.split_heads_forward(q16, k16, v16, qkv),
         lambda: heads.split_heads_forward(q, k, v, qkv), 3 * nc * (f32 + bf16)),
        ("split heads, bf16 -> bf16", lambda: heads.split_heads_forward(q16, k16, v16, qkv16),
         lambda: heads.split_heads_forward(q, k, v, qkv), 3 * nc * 2 * bf16),
        ("merge heads, bf16 -> bf16", lambda: heads.merge_heads_forward(merged16, q16),
         lambda: heads.merge_heads_forward(merged, q), nc * 2 * bf16),
        ("merge heads backward, float32 -> bf16", lambda: heads.merge_heads_backward(q16, merged),
         lambda: heads.merge_heads_backward(q, merged), nc * (f32 + bf16)),
        ("split heads backward, bf16 -> bf16",
         lambda: heads.split_heads_backward(qkv16, q16, k16, v16),
         lambda: heads.split_heads_backward(qkv, q, k, v), 3 * nc * 2 * bf16),
        ("AdamW update + bf16 matrices", lambda: adamw_update(param_bf16=param16), adamw_update,
         n_params * 7 * f32 + n_decay * bf16),
        ("AdamW update", adamw_update, None, n_params * 7 * f32, topt.step),
    ]
    out = []
    for name, fused, unfused, nbytes, *theirs in rows:
        ms = cuda_time(fused, reps)
        pair_ms = cuda_time(unfused, reps) if unfused else None
        torch_ms = torch_time(theirs[0], reps) if theirs else None
        out.append((name, ms, pair_ms, nbytes, torch_ms))
        print(f"  {name:52s} {ms:8.3f} ms  {nbytes / ms / 1e6:6.0f} GB/s"
              + (f"   unfused {pair_ms:8.3f} ms" if pair_ms else "")
              + (f"   torch {torch_ms:8.3f} ms" if torch_ms else ""), flush=True)
    return out


def fused_report(rows):
    lines = ["## Fused kernels of mixed precision at andrea-120m shapes "
             "(N = B·T = 16384 rows, C 768, V 50304)", "",
             "GB/s: the bytes the kernel must read and write once each, over its time; the "
             "copy's row is the device's rate for them. PyTorch: the same work in the same "
             "dtypes (`F.cross_entropy` forward and backward on bf16 logits, "
             "`torch.optim.AdamW(fused=True)`; the copy `Tensor.copy_`).", "",
             "| kernel | ms | GB/s | the unfused launches it replaces (for the bf16 head copies "
             "and AdamW, the same launch in float32), ms | unfused / fused | PyTorch ms | "
             "PyTorch / microgpt |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for name, ms, pair_ms, nbytes, torch_ms in rows:
        pair = f"{pair_ms:.3f} | {pair_ms / ms:.2f}" if pair_ms else "n/a | "
        theirs = f"{torch_ms:.3f} | {torch_ms / ms:.2f}" if torch_ms else "n/a | "
        lines.append(f"| {name} | {ms:.3f} | {nbytes / ms / 1e6:.0f} | {pair} | {theirs} |")
    return lines + [""]
