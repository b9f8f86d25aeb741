"""Every backend op at andrea-120m shapes, beside the PyTorch op that does the same work
in float32 (TF32 off)."""

import numpy as np

from .timing import cuda_time, torch_time


def bench_kernels(reps):
    import torch
    import torch.nn.functional as F
    from microgpt.cuda_backend import CudaBackend

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    ops = CudaBackend()
    B, T, C, H, V = 16, 1024, 768, 12, 50304
    D, N = C // H, B * T
    rng = np.random.default_rng(0)

    def dev(*shape, scale=1.0):
        return ops.to_device((rng.standard_normal(shape) * scale).astype(np.float32))

    def tdev(*shape, scale=1.0, grad=False):
        return (torch.randn(*shape, device="cuda") * scale).requires_grad_(grad)

    x, w_qkv, qkv = dev(N, C), dev(C, 3 * C, scale=0.02), dev(B, T, 3 * C)
    w_o, proj = dev(C, C, scale=0.02), dev(N, C)
    q, k, v, y, lse = (
        dev(B, H, T, D),
        dev(B, H, T, D),
        dev(B, H, T, D),
        dev(B, H, T, D),
        dev(B, H, T),
    )
    dq, dk, dv = dev(B, H, T, D), dev(B, H, T, D), dev(B, H, T, D)
    delta = dev(B, H, T)
    merged, fc, fc_out = dev(B, T, C), dev(N, 4 * C), dev(N, 4 * C)
    w_fc, w_proj = dev(C, 4 * C, scale=0.02), dev(4 * C, C, scale=0.02)
    ln_w, ln_b, mean, rstd, ln_out = dev(C), dev(C), dev(N), dev(N), dev(N, C)
    logits, losses, targets = dev(N, V), dev(N), ops.to_device(rng.integers(0, V, N))
    wte, wpe, idx = (
        dev(V, C, scale=0.02),
        dev(T, C, scale=0.02),
        ops.to_device(rng.integers(0, V, (B, T))),
    )
    logits_lse = dev(N)
    ops.attention_forward(y, lse, q, k, v)  # realistic lse for the backward
    flat = 124_392_960  # andrea-120m's parameter count
    p, g, m = dev(flat, scale=0.02), dev(flat, scale=1e-3), dev(flat, scale=1e-3)
    vv, nsq = ops.zeros((flat,)), ops.zeros((1,))
    hparams = ops.to_device(np.array([1, 1e-4, 0.1, 0.05], np.float32))
    metrics_log = ops.zeros((1024, 3))
    kv = dev(B, T, 2 * C)
    step_qkv, step_out, slots = dev(B, 1, 3 * C), dev(B, 1, C), ops.to_device(np.arange(B))
    # every sequence at the cache's last position, with tokens left to draw (the sampling
    # row advances the positions: it comes last, with a capacity it never reaches)
    seq = ops.to_device(np.array([[0, T - 1, 2**30, 0]] * B, np.int32))

    tx, tw, tw_o = tdev(N, C), tdev(C, 3 * C, scale=0.02), tdev(C, C, scale=0.02)
    tq, tk, tv = (tdev(B, H, T, D, grad=True) for _ in range(3))
    tlogits, ttargets = tdev(N, V), torch.randint(0, V, (N,), device="cuda")
    tfc, tw_fc = tdev(N, 4 * C), tdev(C, 4 * C, scale=0.02)
    tln_w, tln_b = tdev(C), tdev(C)
    tsdpa = F.scaled_dot_product_attention(tq, tk, tv, is_causal=True)
    tdo = torch.randn_like(tsdpa)

    rows = [
        (
            "fused QKV GEMM 16384x768 @ 768x2304",
            lambda: ops.matmul(qkv.reshape(N, 3 * C), x, w_qkv),
            lambda: torch.mm(tx, tw),
            2 * N * C * 3 * C,
        ),
        (
            "split heads (B,T,3C) -> 3 x (B,H,T,D)",
            lambda: ops.split_heads_forward(q, k, v, qkv),
            None,
            0,
        ),
        (
            "attention forward, causal",
            lambda: ops.attention_forward(y, lse, q, k, v),
            lambda: F.scaled_dot_product_attention(tq, tk, tv, is_causal=True),
            2 * B * H * T * T * D,
        ),
        (
            "attention backward",
            lambda: ops.attention_backward(dq, dk, dv, delta, y, q, k, v, y, lse),
            lambda: torch.autograd.grad(tsdpa, (tq, tk, tv), tdo, retain_graph=True),
            5 * B * H * T * T * D,
        ),
        ("merge heads (B,H,T,D) -> (B,T,C)", lambda: ops.merge_heads_forward(merged, y), None, 0),
        (
            "W_O GEMM 16384x768 @ 768x768",
            lambda: ops.matmul(proj, merged.reshape(N, C), w_o),
            lambda: torch.mm(tx, tw_o),
            2 * N * C * C,
        ),
        (
            "layernorm forward",
            lambda: ops.layernorm_forward(ln_out, mean, rstd, x, ln_w, ln_b),
            lambda: F.layer_norm(tx, (C,), tln_w, tln_b),
            0,
        ),
        ("residual add (B, T, C)", lambda: ops.residual_forward(proj, merged.reshape(N, C), x),
         lambda: tx + tx, 0),
        ("residual add + layernorm forward",
         lambda: ops.residual_layernorm_forward(proj, ln_out, mean, rstd, merged.reshape(N, C),
                                                x, ln_w, ln_b), None, 0),
        (
            "MLP up GEMM 16384x768 @ 768x3072, and GELU",
            lambda: ops.matmul_gelu_forward(fc_out, fc, x, w_fc),
            lambda: F.gelu(torch.mm(tx, tw_fc), approximate="tanh"),
            2 * N * C * 4 * C,
        ),
        (
            "gelu forward (N, 4C)",
            lambda: ops.gelu_forward(fc_out, fc),
            lambda: F.gelu(tfc, approximate="tanh"),
            0,
        ),
        ("encoder forward", lambda: ops.encoder_forward(merged, idx, wte, wpe), None, 0),
        (
            "crossentropy forward (16384 x 50304)",
            lambda: ops.crossentropy_forward(losses, logits_lse, logits, targets),
            lambda: F.cross_entropy(tlogits, ttargets),
            0,
        ),
        (
            "LM head GEMM 16384x768 @ (50304x768)^T",
            lambda: ops.matmul(logits, x, wte, transpose_b=True),
            None,
            2 * N * C * V,
        ),
        ("global grad norm (124M)", lambda: ops.global_norm_squared(nsq, g), None, 0),
        ("AdamW schedule (lr, bias corrections)",
         lambda: ops.adamw_schedule(hparams, lr=1e-4, warmup_steps=10, total_steps=1000,
                                    min_lr_ratio=0.1, beta1=0.9, beta2=0.95), None, 0),
        ("AdamW update (124M)",
         lambda: ops.adamw_update(p, g, m, vv, nsq, hparams, weight_decay=0.1,
                                  n_decay=flat // 2, max_norm=1.0, beta1=0.9, beta2=0.95,
                                  eps=1e-8), None, 0),
        ("record step metrics (16384 losses)",
         lambda: ops.record_step(metrics_log, losses, nsq, hparams), None, 0),
        # generation: a decoding step of a batch of 16 at the last position of a full
        # 1024-position cache, and a prefill of its 16 x 1024 positions
        ("decode embedding (16 sequences)",
         lambda: ops.decode_embedding(merged[:, :1], seq, wte, wpe), None, 0),
        ("KV cache write, prefill (16 x 1024 positions)",
         lambda: ops.kv_cache_write(kv, qkv, slots), None, 0),
        ("decoding attention against the cache (16 x 1024)",
         lambda: ops.attention_decode(step_out, kv, step_qkv, seq, H), None, 0),
        ("sampling, top-k 40 (16 x 50304 logits)",
         lambda: ops.sample_tokens(seq, logits[:B], 2**30, temperature=0.8, top_k=40), None, 0),
    ]
    # the backward passes (microgpt's only; PyTorch's GEMM twins for scale)
    dw_qkv, ln_dw, ln_db = dev(C, 3 * C), dev(C), dev(C)
    dwte, dwpe, tdy = dev(V, C), dev(T, C), tdev(N, 3 * C)
    db_qkv = dev(3 * C)
    rows += [
        ("bias backward: column sums of the QKV dY (16384 x 2304)",
         lambda: ops.bias_backward(db_qkv, qkv.reshape(N, 3 * C)), lambda: tdy.sum(0), 0),
        ("QKV GEMM backward dX = dY @ W^T", lambda: ops.matmul(x, qkv.reshape(N, 3 * C), w_qkv,
                                                               transpose_b=True),
         lambda: torch.mm(tdy, tw.T), 2 * N * C * 3 * C),
        ("QKV GEMM backward dW += X^T @ dY",
         lambda: ops.matmul(dw_qkv, x, qkv.reshape(N, 3 * C), transpose_a=True, accumulate=True),
         lambda: torch.mm(tx.T, tdy), 2 * N * C * 3 * C),
        ("split heads backward", lambda: ops.split_heads_backward(qkv, dq, dk, dv), None, 0),
        ("merge heads backward", lambda: ops.merge_heads_backward(dq, merged), None, 0),
        ("layernorm backward", lambda: ops.layernorm_backward(proj, ln_dw, ln_db, ln_out, x, ln_w,
                                                              mean, rstd), None, 0),
        ("gelu backward, in place", lambda: ops.gelu_backward(fc_out, fc_out, fc), None, 0),
        ("MLP down GEMM backward dX = dY @ W^T, through GELU",
         lambda: ops.matmul_gelu_backward(fc_out, x, w_proj, fc), None, 2 * N * C * 4 * C),
        ("encoder backward", lambda: ops.encoder_backward(dwte, dwpe, merged, idx), None, 0),
        ("crossentropy forward + backward, in place over the logits",
         lambda: ops.crossentropy_forward_backward(losses, logits, targets, 1.0 / N), None, 0),
    ]
    out = []
    for name, ours, theirs, flops in rows:
        ms = cuda_time(ours, reps)
        ref_ms = torch_time(theirs, reps) if theirs else None
        out.append((name, ms, ref_ms, flops))
        print(
            f"  {name:45s} {ms:9.3f} ms" + (f"   torch {ref_ms:8.3f} ms" if ref_ms else ""),
            flush=True,
        )
    return out


def kernels_report(rows):
    lines = [
        "## Kernels at andrea-120m shapes (B 16, T 1024, C 768, 12 heads of 64, V 50304)",
        "",
        "| op | microgpt ms | TFLOP/s | PyTorch fp32 ms | PyTorch / microgpt |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, ms, ref_ms, flops in rows:
        tflops = f"{flops / ms / 1e9:.1f}" if flops else ""
        ref = f"{ref_ms:.3f}" if ref_ms else "n/a"
        ratio = f"{ref_ms / ms:.2f}" if ref_ms else ""
        lines.append(f"| {name} | {ms:.3f} | {tflops} | {ref} | {ratio} |")
    return lines + [""]
