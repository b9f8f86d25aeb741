"""The NumPy reference: every operation of a GPT training step, forward and backward.

This module is the oracle. Each function is plain NumPy, works in float32 and float64,
and returns its outputs (plus what its backward needs) instead of writing into buffers.
The CUDA kernel of the same name in ``microgpt.kernels`` is held to it by the tests; the
numpy backend (``microgpt.backend``) runs the model on it.

Shapes: B batch, T time, C = d_model, H heads, D = head_dim = C // H, V vocabulary.
Weights multiply from the right: ``y = x @ W``.
"""
import math

import numpy as np

LN_EPS = 1e-5
GELU_SCALE = math.sqrt(2.0 / math.pi)


# ----------------------------------------------------------------------------------
# token + position embedding

def encoder_forward(idx, wte, wpe):
    """idx (B, T) int, wte (V, C), wpe (context, C) -> x (B, T, C)."""
    T = idx.shape[1]
    return wte[idx] + wpe[:T]


def encoder_backward(dx, idx, vocab_size, context):
    """dx (B, T, C) -> dwte (V, C), dwpe (context, C); repeated tokens add up."""
    B, T, C = dx.shape
    dwte = np.zeros((vocab_size, C), dx.dtype)
    np.add.at(dwte, idx.reshape(-1), dx.reshape(-1, C))
    dwpe = np.zeros((context, C), dx.dtype)
    dwpe[:T] = dx.sum(axis=0)
    return dwte, dwpe


# ----------------------------------------------------------------------------------
# LayerNorm over the last axis

def layernorm_forward(x, weight, bias, eps=LN_EPS):
    """x (N, C) -> y (N, C), mean (N,), rstd (N,)."""
    mean = x.mean(axis=-1)
    xc = x - mean[:, None]
    rstd = 1.0 / np.sqrt((xc * xc).mean(axis=-1) + eps)
    return layernorm_output(x, weight, bias, mean, rstd), mean, rstd


def layernorm_output(x, weight, bias, mean, rstd):
    """y (N, C) from x and its statistics: the forward's output, as the backward recomputes
    it for the dW of the layer after the norm."""
    return (x - mean[:, None]) * rstd[:, None] * weight + bias


def layernorm_backward(dy, x, weight, mean, rstd):
    """-> dx (N, C), dweight (C,), dbias (C,)."""
    xhat = (x - mean[:, None]) * rstd[:, None]
    dxhat = dy * weight
    dx = rstd[:, None] * (dxhat
                          - dxhat.mean(axis=-1, keepdims=True)
                          - xhat * (dxhat * xhat).mean(axis=-1, keepdims=True))
    return dx, (dy * xhat).sum(axis=0), dy.sum(axis=0)


def residual_layernorm_forward(a, b, weight, bias, eps=LN_EPS):
    """The residual add and the LayerNorm after it, one op: a, b (N, C) -> resid = a + b
    (N, C), y (N, C), mean (N,), rstd (N,). Its backward is layernorm_backward, whose dx
    adds to the gradient of resid (the add passes it to a and to b unchanged)."""
    resid = a + b
    return (resid, *layernorm_forward(resid, weight, bias, eps))


# ----------------------------------------------------------------------------------
# matmul: the fused QKV projection, W_O, the MLP and the tied LM head are all this

def matmul_forward(x, w, bias=None):
    """x (N, K) @ w (K, M) (+ bias (M,) on every row) -> (N, M)."""
    return x @ w if bias is None else x @ w + bias


def matmul_backward(dy, x, w):
    """-> dx = dy @ w.T (N, K), dw = x.T @ dy (K, M)."""
    return dy @ w.T, x.T @ dy


def bias_backward(dy):
    """dy (N, M) -> dbias (M,), the column sums: every row added the same bias."""
    return dy.sum(axis=0)


# ----------------------------------------------------------------------------------
# split heads / merge heads: the reshape + transpose around attention

def split_heads_forward(qkv, n_head):
    """qkv (B, T, 3C) -> q, k, v each (B, H, T, D), each head's T x D slice contiguous.

    Columns [0:C] of qkv are Q, [C:2C] K, [2C:3C] V; head h owns columns h*D:(h+1)*D of
    each, so the fused projection's W_Q[:, h*D:(h+1)*D] is head h's W_Q^h.
    """
    B, T, C3 = qkv.shape
    D = C3 // 3 // n_head
    heads = qkv.reshape(B, T, 3, n_head, D).transpose(2, 0, 3, 1, 4)  # (3, B, H, T, D)
    q, k, v = (np.ascontiguousarray(a) for a in heads)
    return q, k, v


def split_heads_backward(dq, dk, dv):
    """dq, dk, dv (B, H, T, D) -> dqkv (B, T, 3C)."""
    B, H, T, D = dq.shape
    stacked = np.stack([dq, dk, dv])                                   # (3, B, H, T, D)
    return np.ascontiguousarray(stacked.transpose(1, 3, 0, 2, 4)).reshape(B, T, 3 * H * D)


def merge_heads_forward(y):
    """y (B, H, T, D) -> (B, T, C), heads side by side: the concat that W_O mixes."""
    B, H, T, D = y.shape
    return np.ascontiguousarray(y.transpose(0, 2, 1, 3)).reshape(B, T, H * D)


def merge_heads_backward(dout, n_head):
    """dout (B, T, C) -> dy (B, H, T, D)."""
    B, T, C = dout.shape
    return np.ascontiguousarray(dout.reshape(B, T, n_head, C // n_head).transpose(0, 2, 1, 3))


# ----------------------------------------------------------------------------------
# causal scaled-dot-product attention, one (batch, head) slice at a time in spirit

def attention_weights(q, k):
    """q, k (B, H, T, D) -> P (B, H, T, T): causal softmax(q k^T / sqrt(D)), and its
    row-wise logsumexp (B, H, T), the one statistic the backward needs."""
    T, D = q.shape[-2:]
    scores = q @ k.swapaxes(-1, -2) / math.sqrt(D)
    future = np.triu(np.ones((T, T), dtype=bool), k=1)
    scores = np.where(future, -np.inf, scores)
    row_max = scores.max(axis=-1, keepdims=True)
    expd = np.exp(scores - row_max)
    row_sum = expd.sum(axis=-1, keepdims=True)
    lse = (row_max + np.log(row_sum))[..., 0]
    return expd / row_sum, lse


def attention_forward(q, k, v):
    """-> out (B, H, T, D), lse (B, H, T)."""
    p, lse = attention_weights(q, k)
    return p @ v, lse


def attention_delta(dout, out):
    """-> delta (B, H, T) = rowsum(dout * out): for out = P v, rowsum(dP * P) with dP =
    dout v^T, the term of the softmax backward that each row shares."""
    return (dout * out).sum(axis=-1)


def attention_backward(dout, q, k, v, out, lse):
    """-> dq, dk, dv (B, H, T, D). P is recomputed from q, k and lse, as a fused kernel does."""
    T, D = q.shape[-2:]
    scores = q @ k.swapaxes(-1, -2) / math.sqrt(D)
    future = np.triu(np.ones((T, T), dtype=bool), k=1)
    p = np.where(future, 0.0, np.exp(scores - lse[..., None])).astype(q.dtype)
    dv = p.swapaxes(-1, -2) @ dout
    dp = dout @ v.swapaxes(-1, -2)
    # softmax backward: dS = P * (dP - rowsum(dP * P)), and rowsum(dP * P) = delta
    ds = p * (dp - attention_delta(dout, out)[..., None]) / math.sqrt(D)
    return ds @ k, ds.swapaxes(-1, -2) @ q, dv


# ----------------------------------------------------------------------------------
# residual add and the tanh-approximated GELU

def residual_forward(a, b):
    return a + b


def gelu_forward(x):
    return 0.5 * x * (1.0 + np.tanh(GELU_SCALE * (x + 0.044715 * x * x * x)))


def gelu_backward(dy, x):
    u = GELU_SCALE * (x + 0.044715 * x * x * x)
    t = np.tanh(u)
    du = GELU_SCALE * (1.0 + 3 * 0.044715 * x * x)
    return dy * (0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * du)


# ----------------------------------------------------------------------------------
# softmax cross-entropy over the vocabulary

def crossentropy_forward(logits, targets):
    """logits (N, V), targets (N,) int -> losses (N,), lse (N,)."""
    row_max = logits.max(axis=-1)
    lse = row_max + np.log(np.exp(logits - row_max[:, None]).sum(axis=-1))
    losses = lse - logits[np.arange(len(targets)), targets]
    return losses, lse


def crossentropy_backward(dloss, logits, lse, targets):
    """d(sum_i dloss * losses_i)/dlogits = dloss * (softmax(logits) - onehot(targets)).

    dloss is one scalar: 1/N for the mean loss over N tokens."""
    dlogits = np.exp(logits - lse[:, None])
    dlogits[np.arange(len(targets)), targets] -= 1.0
    return (dloss * dlogits).astype(logits.dtype)


def crossentropy_forward_backward(logits, targets, dloss):
    """Both passes as one op, as the training step needs them: -> losses (N,), and
    dlogits (N, V), the gradient of sum_i dloss * losses_i."""
    losses, lse = crossentropy_forward(logits, targets)
    return losses, crossentropy_backward(dloss, logits, lse, targets)


# ----------------------------------------------------------------------------------
# AdamW with decoupled weight decay; the gradient clip is folded in as grad_scale

def global_norm(grad):
    """The L2 norm of a (flat) gradient, accumulated in float64."""
    g = grad.astype(np.float64, copy=False)
    return float(np.sqrt(np.dot(g.ravel(), g.ravel())))


def clip_scale(norm, max_norm):
    """The factor that brings a gradient of this norm to at most max_norm."""
    return min(1.0, max_norm / (norm + 1e-6))


def adamw_update(param, grad, m, v, *, lr, step, weight_decay, beta1=0.9, beta2=0.95,
                 eps=1e-8, grad_scale=1.0):
    """One AdamW step (step counts from 1); returns new param, m, v."""
    g = grad * grad_scale
    m = beta1 * m + (1 - beta1) * g
    v = beta2 * v + (1 - beta2) * g * g
    m_hat = m / (1 - beta1 ** step)
    v_hat = v / (1 - beta2 ** step)
    param = param - lr * (m_hat / (np.sqrt(v_hat) + eps) + weight_decay * param)
    return param, m, v


def lr_schedule(step, *, lr, warmup_steps, total_steps, min_lr_ratio):
    """The learning rate of step (counting from 0): linear warmup to lr over warmup_steps,
    then cosine decay to min_lr_ratio * lr at total_steps."""
    if step < warmup_steps:
        return lr * (step + 1) / warmup_steps
    span = max(1, total_steps - warmup_steps)
    progress = min(1.0, (step - warmup_steps) / span)
    cosine = 0.5 * (1.0 + math.cos(math.pi * progress))
    return lr * (min_lr_ratio + (1.0 - min_lr_ratio) * cosine)


# ----------------------------------------------------------------------------------
# generation: a KV cache in the fused row layout of the QKV projection
#
# The cache of one layer is kv_cache (B, S, 2C), S the positions it can hold: columns
# [0:C] are the keys and [C:2C] the values of each position, head h at columns h*D, as
# the fused projection's columns [C:3C] are. The new positions' rows are then one copy,
# and attention reads its heads in place: no split or merge around it.

def kv_cache_rows(qkv):
    """qkv (B, T, 3C) -> the cache rows (B, T, 2C) of these T positions: K and V side by side."""
    C = qkv.shape[2] // 3
    return qkv[:, :, C:]


def attention_cached_forward(qkv, kv_cache, start, n_head):
    """The positions start .. start+T-1, their Q in qkv (B, T, 3C), attend causally to the
    cache's positions 0 .. start+T-1 (kv_cache (B, S, 2C), the new rows already written)
    -> out (B, T, C), the heads merged as merge_heads_forward leaves them."""
    B, T, C3 = qkv.shape
    C = C3 // 3
    D = C // n_head
    n = start + T

    def heads(x, rows):                                         # (B, rows, C) -> (B, H, rows, D)
        return x.reshape(B, rows, n_head, D).transpose(0, 2, 1, 3)
    q = heads(qkv[:, :, :C], T)
    k, v = heads(kv_cache[:, :n, :C], n), heads(kv_cache[:, :n, C:], n)
    scores = q @ k.swapaxes(-1, -2) / math.sqrt(D)              # (B, H, T, n)
    future = np.arange(n)[None, :] > start + np.arange(T)[:, None]
    scores = np.where(future, -np.inf, scores)
    p = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return merge_heads_forward(p / p.sum(axis=-1, keepdims=True) @ v)


# ----------------------------------------------------------------------------------
# decoding: a batch of sequences at their own positions, and sampling
#
# A decoding batch's state is seq (B, 4) int: per sequence the token it runs next, that
# token's position, the tokens it has left to generate and the tokens it has drawn
# (SEQ_COLUMNS). kernels/decode.py and kernels/sampling.py are the kernels.

SEQ_COLUMNS = ("token", "position", "left", "drawn")
TOKEN, POSITION, LEFT, DRAWN = range(4)
NOT_FINITE = -1             # left, after logits that are not finite


def decode_embedding(seq, wte, wpe):
    """-> x (B, 1, C): each sequence's token at its position (the last row of wpe for one
    past the cache, whose step changes nothing)."""
    pos = np.minimum(seq[:, POSITION], wpe.shape[0] - 1)
    return (wte[seq[:, TOKEN]] + wpe[pos])[:, None]


def kv_cache_write(kv_cache, qkv, slots):
    """The prefill: -> kv_cache (B, S, 2C) with row slots[r], positions 0 .. T-1, the cache
    rows of qkv (n, T, 3C) row r."""
    out = kv_cache.copy()
    out[slots, :qkv.shape[1]] = kv_cache_rows(qkv)
    return out


def attention_decode(kv_cache, qkv, seq, n_head):
    """Each sequence's new position (its q, k, v in qkv (B, 1, 3C)) against the cache's
    positions 0 .. position -> (out (B, 1, C), the cache with the new rows written). A
    sequence whose position is past the cache gets None for out and no write."""
    cache, out = kv_cache.copy(), [None] * len(seq)
    for b, pos in enumerate(seq[:, POSITION]):
        if pos < kv_cache.shape[1]:
            cache[b, pos] = kv_cache_rows(qkv[b:b + 1])[0, 0]
            out[b] = attention_cached_forward(qkv[b:b + 1], cache[b:b + 1], pos, n_head)[0]
    return out, cache


def _hash32(x):
    """lowbias32 (C. Wellons), on uint64 arrays or scalars holding 32-bit values."""
    x = np.uint64(x) if np.isscalar(x) else x.astype(np.uint64)
    mask = np.uint64(0xFFFFFFFF)
    x ^= x >> np.uint64(16)
    x = (x * np.uint64(0x7FEB352D)) & mask
    x ^= x >> np.uint64(15)
    x = (x * np.uint64(0x846CA68B)) & mask
    return x ^ (x >> np.uint64(16))


def uniforms(seed, b, drawn, n):
    """The draw number `drawn` of sequence b's generator: n uniforms in (0, 1), one per
    token id, a hash of (seed, b, drawn, id) (as float32, the kernel's values)."""
    base = _hash32(_hash32(_hash32(seed & 0xFFFFFFFF) ^ np.uint64(b)) ^ np.uint64(drawn))
    bits = _hash32(base ^ _hash32(np.arange(n))) >> np.uint64(8)
    return ((bits.astype(np.float32) + np.float32(0.5)) * np.float32(2.0**-24))


def sampling_keep(x, top_k, top_p):
    """Which of the tempered logits x (V,) a draw keeps: the top_k largest (0: all; ties
    at the k-th kept), then the smallest set of the largest of those whose softmax sums to
    at least top_p (ties kept)."""
    keep = np.ones(x.shape, bool)
    if 0 < top_k < x.size:
        keep &= x >= np.sort(x)[-top_k]
    if top_p < 1:
        p = np.where(keep, np.exp(x - x.max()), 0.0)
        order = np.argsort(-x, kind="stable")
        cut = np.searchsorted(np.cumsum(p[order]), top_p * p.sum())
        keep &= x >= x[order[min(cut, x.size - 1)]]
    return keep


def sampling_probabilities(logits, temperature, top_k=0, top_p=1.0):
    """The distribution of one draw from logits (V,) (float64): one-hot on the first
    largest at temperature 0, else softmax(logits / temperature) over sampling_keep."""
    logits = np.asarray(logits, np.float64)
    if temperature == 0:
        return np.eye(logits.size)[np.argmax(logits)]
    x = logits / temperature
    p = np.where(sampling_keep(x, top_k, top_p), np.exp(x - x.max()), 0.0)
    return p / p.sum()


def sample_tokens(seq, logits, capacity, *, vocab, temperature, top_k, top_p, seed,
                  stop_id):
    """-> seq advanced by one draw per active sequence (tokens left, position below
    capacity) from the first vocab of its logits (B, V): greedy at temperature 0, else
    the Gumbel-max draw argmax over the kept x of x - log(-log(u)), u = uniforms(seed, b,
    drawn), which samples sampling_probabilities."""
    seq = seq.copy()
    for b, (_, pos, left, drawn) in enumerate(seq):
        if left <= 0 or pos >= capacity:
            continue
        row = np.asarray(logits[b, :vocab], np.float32)
        if not np.isfinite(row).all():
            seq[b, LEFT] = NOT_FINITE
            continue
        if temperature == 0:
            token = int(np.argmax(row))
        else:
            x = row * (np.float32(1) / np.float32(temperature))
            u = uniforms(seed, b, drawn, vocab).astype(np.float64)
            score = np.where(sampling_keep(x.astype(np.float64), top_k, top_p),
                             x - np.log(-np.log(u)), -np.inf)
            token = int(np.argmax(score))
        seq[b] = token, pos + 1, 0 if token == stop_id else left - 1, drawn + 1
    return seq
