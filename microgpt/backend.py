"""Backends: the ops the model is written against (microgpt.ops), on NumPy or on CUDA.

The NumPy backend runs the reference (``microgpt.reference``) and copies its results into
the model's buffers, so the model that trains on the CPU is the oracle itself. The CUDA
backend (``microgpt.cuda_backend``) has the same methods with the same signatures, backed
by ``microgpt.kernels``; tests/test_ops.py holds both to microgpt.ops.OPS.
"""
import numpy as np

from microgpt import reference as ref
from microgpt.errors import BackendError


class _Done:
    """What a NumPy backend's fetch returns: its copy has happened already."""

    def synchronize(self):
        pass


_DONE = _Done()


class NumpyBackend:
    name = "numpy"
    graphs = False      # nothing to capture: every op runs when called

    def __init__(self, dtype=np.float32):
        self.dtype = np.dtype(dtype)

    # memory ------------------------------------------------------------------------
    def zeros(self, shape, dtype=None):
        return np.zeros(shape, dtype or self.dtype)

    def to_device(self, host):
        return np.array(host, dtype=host.dtype if host.dtype.kind == "i" else self.dtype)

    def to_host(self, arr):
        return np.array(arr)

    def copy(self, dst, src):
        dst[...] = src

    def host_buffer(self, shape, dtype):
        return np.empty(shape, dtype)

    def fetch(self, host, arr):
        """host = arr now -> an object whose synchronize() returns (CudaBackend's copy is
        asynchronous, with an event)."""
        host[...] = arr
        return _DONE

    def fill_zero(self, arr):
        arr[...] = 0

    def synchronize(self):
        pass

    def join(self):
        """Nothing runs beside the ops here (CudaBackend.join)."""

    def heads_view(self, fused, part, n_head, head_dim):
        """The (B, H, T, D) view of part `part` of fused rows (B, T, P * H * D), no copy:
        head h of that part is the D columns from (part * H + h) * D, T rows apart."""
        B, T, _ = fused.shape
        return fused.reshape(B, T, -1, n_head, head_dim)[:, :, part].transpose(0, 2, 1, 3)

    # the ops -----------------------------------------------------------------------
    def encoder_forward(self, out, idx, wte, wpe):
        out[...] = ref.encoder_forward(idx, wte, wpe)

    def encoder_backward(self, dwte, dwpe, dout, idx, runs=None):
        # (runs: the CUDA backend's deterministic sort; the reference sums in a fixed
        # order without it)
        dw, dp = ref.encoder_backward(dout, idx, *dwte.shape[:1], dwpe.shape[0])
        dwte += dw
        dwpe += dp

    def layernorm_forward(self, out, mean, rstd, inp, weight, bias):
        out[...], mean[...], rstd[...] = ref.layernorm_forward(inp, weight, bias)

    def residual_layernorm_forward(self, resid, out, mean, rstd, a, b, weight, bias):
        resid[...], out[...], mean[...], rstd[...] = ref.residual_layernorm_forward(
            a, b, weight, bias)

    def layernorm_backward(self, dinp, dweight, dbias, dout, inp, weight, mean, rstd, *,
                           dinp_copy=None, dinp_sum=None, out=None, bias=None):
        """dinp, dweight, dbias += the gradients; dinp_copy, if given, = the new dinp (in
        its own dtype: the mixed-precision step's bf16 operand of the next GEMMs);
        dinp_sum, if given, += the new dinp's column sums (the gradient of the bias of the
        layer whose output dinp is the gradient of); out, if given (with bias), = the
        forward's output from the saved statistics, the next layer's dW operand."""
        if out is not None:
            out[...] = ref.layernorm_output(inp, weight, bias, mean, rstd)
        dx, dw, db = ref.layernorm_backward(dout, inp, weight, mean, rstd)
        dinp += dx
        dweight += dw
        dbias += db
        if dinp_copy is not None:
            dinp_copy[...] = dinp
        if dinp_sum is not None:
            dinp_sum += ref.bias_backward(dinp)

    def matmul(self, out, a, b, transpose_a=False, transpose_b=False, accumulate=False,
               bias=None):
        """out (M, N) = op(a) @ op(b) (+ bias (N,) on every row), op transposing when
        asked; += when accumulate (then without a bias)."""
        product = (a.T if transpose_a else a) @ (b.T if transpose_b else b)
        if accumulate:
            out += product
        else:
            out[...] = product if bias is None else product + bias

    def matmul_gelu_forward(self, out, pre, a, b, bias=None):
        """pre (M, N) = a @ b (+ bias (N,)) and out = gelu(pre): the MLP's up projection and
        activation."""
        pre[...] = ref.matmul_forward(a, b, bias)
        out[...] = ref.gelu_forward(pre)

    def bias_backward(self, dbias, dout):
        """dbias (N,) += the column sums of dout (M, N): a bias's gradient."""
        dbias += ref.bias_backward(dout)

    def matmul_gelu_backward(self, dpre, dout, b, pre, dbias=None, act=None):
        """dpre (M, N) = (dout @ b^T) * gelu'(pre): the gradient through the MLP's down
        projection (weight b) and its activation; dbias (N,), if given, += dpre's column
        sums (the up projection's bias's gradient); act (M, N), if given, = gelu(pre), the
        activation recomputed for the down projection's dW."""
        dpre[...] = ref.gelu_backward(dout @ b.T, pre)
        if dbias is not None:
            dbias += ref.bias_backward(dpre)
        if act is not None:
            act[...] = ref.gelu_forward(pre)

    def split_heads_forward(self, q, k, v, qkv):
        q[...], k[...], v[...] = ref.split_heads_forward(qkv, q.shape[1])

    def split_heads_backward(self, dqkv, dq, dk, dv):
        dqkv[...] = ref.split_heads_backward(dq, dk, dv)

    def merge_heads_forward(self, out, y):
        out[...] = ref.merge_heads_forward(y)

    def merge_heads_backward(self, dy, dout):
        dy[...] = ref.merge_heads_backward(dout, dy.shape[1])

    def attention_forward(self, out, lse, q, k, v):
        out[...], lse[...] = ref.attention_forward(q, k, v)

    def attention_backward(self, dq, dk, dv, delta, dout, q, k, v, out, lse):
        dq[...], dk[...], dv[...] = ref.attention_backward(dout, q, k, v, out, lse)
        delta[...] = ref.attention_delta(dout, out)

    def residual_forward(self, out, a, b):
        np.add(a, b, out=out)

    def gelu_forward(self, out, inp):
        out[...] = ref.gelu_forward(inp)

    def gelu_backward(self, dinp, dout, inp, act=None):
        if act is not None:
            act[...] = ref.gelu_forward(inp)
        dinp[...] = ref.gelu_backward(dout, inp)

    def crossentropy_forward(self, losses, lse, logits, targets):
        losses[...], lse[...] = ref.crossentropy_forward(logits, targets)

    def crossentropy_forward_backward(self, losses, logits, targets, dloss):
        """losses (N,), and logits (N, V) overwritten by the gradient of sum(dloss * losses)."""
        losses[...], logits[...] = ref.crossentropy_forward_backward(logits, targets, dloss)

    def mean(self, x):
        """The mean of x as a Python float (the one value a step reports)."""
        return float(np.mean(x, dtype=np.float64))

    # the optimizer -------------------------------------------------------------------
    def global_norm_squared(self, out, grad):
        """out (1,) = sum of squares of the flat gradient."""
        out[0] = ref.global_norm(grad) ** 2

    def adamw_schedule(self, hparams, *, lr, warmup_steps, total_steps, min_lr_ratio, beta1,
                       beta2):
        """hparams (4,) = microgpt.ops.HPARAMS, advanced to the next update."""
        step = int(hparams[0]) + 1
        rate = ref.lr_schedule(step - 1, lr=lr, warmup_steps=warmup_steps, total_steps=total_steps,
                     min_lr_ratio=min_lr_ratio)
        hparams[...] = (step, rate, 1.0 - beta1 ** step, 1.0 - beta2 ** step)

    def adamw_update(self, param, grad, m, v, norm_squared, hparams, *, weight_decay,
                     n_decay, max_norm, beta1, beta2, eps, param_bf16=None):
        """One AdamW step on flat buffers with the step and learning rate of hparams (4,):
        the first n_decay elements are decayed, the gradient is clipped to max_norm using
        norm_squared (1,), as computed above. param_bf16 (n_decay,), an ml_dtypes.bfloat16
        array when given, receives the updated first n_decay elements rounded to bf16."""
        scale = ref.clip_scale(float(np.sqrt(norm_squared[0])), max_norm)
        step, lr = int(hparams[0]), float(hparams[1])
        for part, wd in ((slice(0, n_decay), weight_decay), (slice(n_decay, None), 0.0)):
            param[part], m[part], v[part] = ref.adamw_update(
                param[part], grad[part], m[part], v[part], lr=lr, step=step,
                weight_decay=wd, beta1=beta1, beta2=beta2, eps=eps, grad_scale=scale)
        if param_bf16 is not None:
            param_bf16[...] = param[:n_decay]      # numpy's cast to bfloat16 rounds to nearest

    def record_step(self, log, losses, norm_squared, hparams):
        """Row (step - 1) % rows of log = microgpt.ops.LOG_COLUMNS of the step hparams
        describes: its mean loss, gradient norm and learning rate."""
        log[(int(hparams[0]) - 1) % log.shape[0]] = (
            np.mean(losses, dtype=np.float64), np.sqrt(norm_squared[0]), hparams[1])

    # generation: a decoding batch and its KV cache (microgpt.generate) ------------------
    def decode_embedding(self, out, seq, wte, wpe):
        """out (B, 1, C) = each sequence's token at its position (seq (B, 4): SEQ_COLUMNS)."""
        out[...] = ref.decode_embedding(seq, wte, wpe)

    def kv_cache_write(self, kv_cache, qkv, slots):
        """The prefill: cache row slots[r] of kv_cache (B, S, 2C), positions 0 .. T-1, =
        the K and V of qkv (n, T, 3C) row r."""
        kv_cache[...] = ref.kv_cache_write(kv_cache, qkv, slots)

    def attention_decode(self, out, kv_cache, qkv, seq, n_head):
        """out (B, 1, C): each sequence's new position against the cache's 0 .. position,
        its key and value written there (a sequence past the cache is left as it is)."""
        rows, kv_cache[...] = ref.attention_decode(kv_cache, qkv, seq, n_head)
        for b, row in enumerate(rows):
            if row is not None:
                out[b] = row

    def sample_tokens(self, seq, logits, capacity, *, vocab=None, temperature=0.0, top_k=0,
                      top_p=1.0, seed=0, stop_id=-1):
        """Each active sequence's next token from its logits (B, V), seq (B, 4) advanced."""
        seq[...] = ref.sample_tokens(seq, logits, capacity,
                                     vocab=logits.shape[1] if vocab is None else vocab,
                                     temperature=temperature, top_k=top_k, top_p=top_p,
                                     seed=seed, stop_id=stop_id)


def cuda_available():
    """True when numba can see a real GPU (the simulator does not count)."""
    try:
        from numba import config, cuda
    except ImportError:
        return False
    return not config.ENABLE_CUDASIM and cuda.is_available()


def get_backend(name, dtype=np.float32, deterministic=False):
    """deterministic: the cuda backend's split-K adds its parts in a fixed order and its
    embedding backward takes no float atomics (CudaBackend); NumPy gives the same bits
    every run anyway."""
    if name == "numpy":
        return NumpyBackend(dtype)
    if name == "cuda":
        if np.dtype(dtype) != np.float32:
            raise BackendError("the cuda backend runs float32 only")
        from microgpt.cuda_backend import CudaBackend   # imports numba.cuda: only when asked
        return CudaBackend(deterministic=deterministic)
    raise BackendError(f"unknown backend {name!r}; choose numpy or cuda")
