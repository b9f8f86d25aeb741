"""The GPT model, written once against a backend (NumPy or CUDA).

GPT-2 architecture: pre-LayerNorm blocks, learned position embeddings, biases in the
linear layers only with config.bias (added in the GEMMs' epilogues), tanh-GELU MLP of
width 4C, LM head tied to the token embedding, mean cross-entropy over all B*T tokens
(over the tokens in use of a padded vocabulary, config.n_tokens). Forward and backward are
spelled out op by op, as a CUDA training engine runs them, with every activation in a
buffer allocated once per
batch shape. The passes only enqueue work; the calls at the end of GPT read results back.
In bf16 the same calls run with bf16 operands for every matmul and attention (the
activation table and GPT.weights say which arrays); the ops pick their kernels by dtype,
and attention reads its heads where the fused QKV GEMM wrote them, so the split and merge
copies run in fp32 alone (microgpt.activations.activation_specs).
"""
import ml_dtypes
import numpy as np

from microgpt.activations import PRECISIONS, Buffers, activation_specs, recompute_mode
from microgpt.backend import get_backend
from microgpt.distributed import LOCAL
from microgpt.errors import BackendError
from microgpt.params import ParamLayout, init_params


def rows(x):
    """(B, T, X) -> (B*T, X), a view: matmuls and LayerNorm see token rows."""
    return x.reshape(x.shape[0] * x.shape[1], x.shape[2])


# ----------------------------------------------------------------------------------
# the model

class GPT:
    """recompute: which of the LayerNorms' and GELU's outputs the backward writes again for
    its dW GEMMs rather than the forward keeping them per layer, as torch.compile's
    partitioner does (activations.RECOMPUTE_MODES): "off", none; "gelu", GELU's output
    alone, 8·C bytes a token a layer less in bf16 (GPT-2 medium at B 16 x 1024: 20.5 ->
    17.5 GiB) for ~0.8% of the step's time by the per-op figures; "all", the norms' too,
    12·C bytes less (GPT-2 XL at B 8 x 1024: 48.2 -> 41.1 GiB) for ~1.5%
    (docs/kernels-step.md, "Memory"); True and False are "all" and "off". The same
    arithmetic either way, up to a float32 rounding of the norm's output and GELU's."""

    def __init__(self, config, backend="numpy", seed=0, dtype=np.float32, precision="fp32",
                 recompute="off"):
        if precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got "
                             f"{precision!r}")
        self.config, self.precision = config, precision
        self.recompute = recompute_mode(recompute)
        self.backend = get_backend(backend, dtype) if isinstance(backend, str) else backend
        if precision == "bf16" and self.backend.name != "cuda":
            raise BackendError("precision bf16 runs on the cuda backend (the tensor cores); "
                               "use fp32 on the CPU")
        if precision == "bf16" and not self.backend.bf16_fits(config.head_dim):
            raise ValueError(f"precision bf16: head_dim {config.head_dim} is wider than flash "
                             "attention's tiles (at most 128); use fp32, or more heads")
        self.layout = ParamLayout(config)
        ops = self.backend
        initial = init_params(config, self.layout, seed)
        self.params_flat = ops.to_device(initial)
        self.grads_flat = ops.zeros((self.layout.size,))
        self.params = self.layout.views(self.params_flat)
        self.grads = self.layout.views(self.grads_flat)
        # what the matmuls read: in bf16 a copy of the matrices (the prefix of the flat
        # layout) rounded to bf16, which the AdamW pass rewrites; the master weights stay
        # float32, and so do the embeddings' lookups and the LayerNorm weights
        self.matrices_flat = None
        self.weights = self.params
        if precision == "bf16":
            self.matrices_flat = ops.zeros((self.layout.n_decay,), np.dtype(np.uint16))
            self.weights = {**self.params,
                            **self.layout.views(self.matrices_flat, matrices_only=True)}
            self._round_matrices(initial)
        # a deterministic backend's embedding backward sums each token's positions in the
        # batch's sorted order, which the host makes as it copies a training batch in
        self.token_runs = None
        if getattr(self.backend, "deterministic", False):
            from microgpt.kernels.embedding import token_runs
            self.token_runs = token_runs
        self._acts = None

    def check_context(self, T):
        if T > self.config.context:
            raise ValueError(f"sequence length {T} exceeds the model's context "
                             f"{self.config.context}")

    # the passes: enqueue work on the backend, read nothing back ------------------------
    def enqueue_forward(self, a):
        """a.batch[0] (token ids) -> a.ln_f, the head's input, and every activation on the
        way (the head runs in chunks of rows, with the loss: enqueue_logits). Each
        residual add is fused into the LayerNorm after it, so the norm that reads resid[i]
        (block i's ln_1, or ln_f after the last block) runs at the end of block i - 1."""
        p = self.params
        self.backend.encoder_forward(a.resid[0], a.batch[0], p["wte"], p["wpe"])
        self.enqueue_blocks(a)

    def enqueue_blocks(self, a, attention=None):
        """a.resid[0] (the embedded tokens) -> a.ln_f: the blocks and the final norm.
        attention(a, i), when given, is block i's attention in place of
        enqueue_attention: generation's (microgpt.generate) against its KV cache."""
        ops, p, w, cfg = self.backend, self.params, self.weights, self.config
        attention = attention or self.enqueue_attention
        out, stats, affine = self._norm_of_resid(a, 0)
        ops.layernorm_forward(out, *stats, rows(a.resid[0]), *affine)
        for i in range(cfg.n_layer):
            h = f"h.{i}."
            ops.matmul(rows(a.qkv[i]), rows(a.ln_1[i]), w[h + "attn.w_qkv"],      # fused QKV
                       bias=p.get(h + "attn.b_qkv"))
            attention(a, i)                                     # qkv[i] -> att_merged[i]
            ops.matmul(rows(a.proj), rows(a.att_merged[i]), w[h + "attn.w_o"],
                       bias=p.get(h + "attn.b_o"))
            ops.residual_layernorm_forward(
                rows(a.mid[i]), rows(a.ln_2[i]), a.ln_2_mean[i], a.ln_2_rstd[i],
                rows(a.resid[i]), rows(a.proj), p[h + "ln_2.weight"], p[h + "ln_2.bias"])
            ops.matmul_gelu_forward(rows(a.fc_gelu[i]), rows(a.fc[i]), rows(a.ln_2[i]),
                                    w[h + "mlp.w_fc"], bias=p.get(h + "mlp.b_fc"))
            ops.matmul(rows(a.proj), rows(a.fc_gelu[i]), w[h + "mlp.w_proj"],
                       bias=p.get(h + "mlp.b_proj"))
            out, stats, affine = self._norm_of_resid(a, i + 1)
            ops.residual_layernorm_forward(rows(a.resid[i + 1]), out, *stats, rows(a.mid[i]),
                                           rows(a.proj), *affine)

    def head_chunks(self, a):
        """[lo, hi) ranges of the batch's token rows that tile them, as many rows each as
        a.logits holds."""
        N, R = a.ln_f.shape[0] * a.ln_f.shape[1], a.logits.shape[0]
        return [(lo, min(lo + R, N)) for lo in range(0, N, R)]

    def enqueue_logits(self, a, lo, hi):
        """The tied head on token rows [lo, hi) of a.ln_f -> their logits, the first
        hi - lo rows of a.logits (returned)."""
        logits = a.logits[:hi - lo]
        self.backend.matmul(logits, rows(a.ln_f)[lo:hi], self.weights["wte"],
                            transpose_b=True)
        return logits

    def enqueue_attention(self, a, i):
        """Block i's causal attention over the batch's own positions: a.qkv[i] ->
        a.att_merged[i]."""
        ops = self.backend
        if not a.heads_in_place:                                             # (B, H, T, D)
            ops.split_heads_forward(a.q[i], a.k[i], a.v[i], a.qkv[i])
        ops.attention_forward(a.att[i], a.att_lse[i], a.q[i], a.k[i], a.v[i])
        if not a.heads_in_place:                                             # (B, T, C)
            ops.merge_heads_forward(a.att_merged[i], a.att[i])

    def _norm_of_resid(self, a, i):
        """The LayerNorm that reads resid[i] -> (its out rows, (mean, rstd), (weight,
        bias)): block i's ln_1, or ln_f after the last block."""
        if i == self.config.n_layer:
            return rows(a.ln_f), (a.ln_f_mean, a.ln_f_rstd), (self.params["ln_f.weight"],
                                                             self.params["ln_f.bias"])
        h = f"h.{i}."
        return rows(a.ln_1[i]), (a.ln_1_mean[i], a.ln_1_rstd[i]), (
            self.params[h + "ln_1.weight"], self.params[h + "ln_1.bias"])

    def enqueue_loss(self, a):
        """a.ln_f and a.batch[1] (targets) -> a.losses, one per token, without a backward
        (evaluation; training gets its losses from enqueue_backward): the head a chunk of
        rows at a time."""
        targets = a.batch[1].reshape(a.losses.size)
        for lo, hi in self.head_chunks(a):
            logits = self._in_use(self.enqueue_logits(a, lo, hi))
            self.backend.crossentropy_forward(a.losses[lo:hi], a.logits_lse[lo:hi], logits,
                                              targets[lo:hi])

    def enqueue_backward(self, a, sync=LOCAL, micro=(0, 1)):
        """a.losses, one per token, and the gradient of their mean -> self.grads, from the
        buffers the forward left in a. The head first, a chunk of rows at a time: the
        chunk's logits, then the loss and its gradient from one pass over them, which it
        overwrites with dlogits, then the chunk's rows of dln and its part of the tied
        head's dW, added in the chunks' order. micro (n, count): a is micro-batch n
        of count that one optimizer step accumulates; the gradient is then of the mean
        over all count micro-batches' tokens, zeroed by the first and added to by the
        others. The GEMMs read
        a.dresid_mm and a.dmerged: in bf16 the copies the LayerNorm backward and the W_O dX
        GEMM write; in fp32 the float32 gradients themselves. sync, a data-parallel world's
        gradient sync (microgpt.distributed), is handed each range of the gradient as it
        becomes final, so its all-reduce overlaps the rest of the backward; after
        sync.finish() the gradient is the world's mean."""
        ops, p, w, g, cfg = self.backend, self.params, self.weights, self.grads, self.config
        copy = None if a.dresid_mm is a.dresid else rows(a.dresid_mm)
        n, count = micro
        if n == 0:
            ops.fill_zero(self.grads_flat)
        targets = a.batch[1].reshape(a.losses.size)
        for lo, hi in self.head_chunks(a):
            dlogits = self.enqueue_logits(a, lo, hi)                             # in place
            # a padded vocabulary's columns keep the logits 0 (their rows of wte are 0): as
            # gradients they are 0 too, so the head's GEMMs take every column
            ops.crossentropy_forward_backward(a.losses[lo:hi], self._in_use(dlogits),
                                              targets[lo:hi], 1.0 / (count * a.losses.size))
            ops.matmul(rows(a.dln)[lo:hi], dlogits, w["wte"])
            ops.matmul(g["wte"], dlogits, rows(a.ln_f)[lo:hi], transpose_a=True,
                       accumulate=True)
        ops.fill_zero(a.dresid)
        # each LayerNorm backward but the first block's ln_1 writes the gradient of an
        # output projection's output (the residual stream's): with biases it sums that
        # bias's gradient too, as it writes dresid (dinp_sum)
        last = f"h.{cfg.n_layer - 1}."
        ops.layernorm_backward(rows(a.dresid), g["ln_f.weight"], g["ln_f.bias"], rows(a.dln),
                               rows(a.resid[-1]), p["ln_f.weight"], a.ln_f_mean, a.ln_f_rstd,
                               dinp_copy=copy, dinp_sum=g.get(last + "mlp.b_proj"))
        for i in reversed(range(cfg.n_layer)):
            h = f"h.{i}."
            # MLP: dresid is the gradient of the block's output and of its MLP branch; a dW
            # GEMM's activation operand, where the forward's is gone, is written again just
            # before it (fc_gelu by the GELU backward, ln_2 and ln_1 by the LayerNorm
            # backwards after their dX GEMMs)
            ops.matmul_gelu_backward(rows(a.dfc), rows(a.dresid_mm), w[h + "mlp.w_proj"],
                                     rows(a.fc[i]), dbias=g.get(h + "mlp.b_fc"),
                                     act=self._again(a, "fc_gelu", i))    # gelu too
            ops.matmul(g[h + "mlp.w_proj"], rows(a.fc_gelu[i]), rows(a.dresid_mm),
                       transpose_a=True, accumulate=True)
            ops.matmul(rows(a.dln), rows(a.dfc), w[h + "mlp.w_fc"], transpose_b=True)
            # attention: dresid is now the gradient of mid, W_O's output
            ops.layernorm_backward(rows(a.dresid), g[h + "ln_2.weight"], g[h + "ln_2.bias"],
                                   rows(a.dln), rows(a.mid[i]), p[h + "ln_2.weight"],
                                   a.ln_2_mean[i], a.ln_2_rstd[i], dinp_copy=copy,
                                   dinp_sum=g.get(h + "attn.b_o"),
                                   **self._norm_again(a, "ln_2", i))
            ops.matmul(g[h + "mlp.w_fc"], rows(a.ln_2[i]), rows(a.dfc),
                       transpose_a=True, accumulate=True)
            ops.matmul(rows(a.dmerged), rows(a.dresid_mm), w[h + "attn.w_o"], transpose_b=True)
            ops.matmul(g[h + "attn.w_o"], rows(a.att_merged[i]), rows(a.dresid_mm),
                       transpose_a=True, accumulate=True)
            if not a.heads_in_place:
                ops.merge_heads_backward(a.datt, a.dmerged)
            ops.attention_backward(a.dq, a.dk, a.dv, a.att_delta, a.datt, a.q[i], a.k[i],
                                   a.v[i], a.att[i], a.att_lse[i])
            if not a.heads_in_place:
                ops.split_heads_backward(a.dqkv, a.dq, a.dk, a.dv)
            if h + "attn.b_qkv" in g:
                self._qkv_bias_backward(g, h, a)
            ops.matmul(rows(a.dln), rows(a.dqkv), w[h + "attn.w_qkv"], transpose_b=True)
            # dresid is now the gradient of the block's input: block i - 1's output
            ops.layernorm_backward(rows(a.dresid), g[h + "ln_1.weight"], g[h + "ln_1.bias"],
                                   rows(a.dln), rows(a.resid[i]), p[h + "ln_1.weight"],
                                   a.ln_1_mean[i], a.ln_1_rstd[i], dinp_copy=copy,
                                   dinp_sum=g.get(f"h.{i - 1}.mlp.b_proj") if i else None,
                                   **self._norm_again(a, "ln_1", i))
            ops.matmul(g[h + "attn.w_qkv"], rows(a.ln_1[i]), rows(a.dqkv),
                       transpose_a=True, accumulate=True)
            if sync is not LOCAL:       # the block's dW, added beside the stream where
                ops.join()              # ordered by parts (gemm.turns.beside), complete
            sync.ready(*self.layout.block_matrices(i))
        # the scatter into wte's gradient, whose other writer, the head, came first
        ops.encoder_backward(g["wte"], g["wpe"], a.dresid, a.batch[0],
                             a.batch[2:] if self.token_runs else None)
        sync.ready(*self.layout.rows("wpe"))
        sync.ready(*self.layout.norms)
        sync.ready(*self.layout.rows("wte"))
        sync.finish()

    @staticmethod
    def _again(a, name, i):
        """Rows of layer i's buffer name, if the backward must write them again (the
        forward's values gone: the arena's scratch), else None."""
        return rows(getattr(a, name)[i]) if name in a.rewritten else None

    def _norm_again(self, a, norm, i):
        """The LayerNorm backward's out and bias for layer i's norm ("ln_1", "ln_2"),
        where its output is written again; else nothing."""
        out = self._again(a, norm, i)
        return {} if out is None else dict(out=out, bias=self.params[f"h.{i}.{norm}.bias"])

    def _qkv_bias_backward(self, g, h, a):
        """The QKV bias's gradient, [q | k | v] (3C,), after the attention backward: q's
        is the column sums of dq, dqkv's first C columns; k's is 0 (a key bias adds
        q . b_k to every score of a query's row, which the softmax takes away), so it
        keeps the gradient's zeros; v's is W_O times b_o's gradient: each row of the
        softmax sums to 1, so dv's column sums are the attention output's gradient's,
        dmerged = dresid W_O^T, whose column sums are W_O times dresid's, which the
        LayerNorm backward summed into b_o's gradient just before. That is a sum over
        micro-batches, as v's must be: the product overwrites. A third of dqkv read (its
        column sums were 24 us of each of 12 calls a step at andrea-120m) and a
        vector-matrix product."""
        C = self.config.d_model
        dbias = g[h + "attn.b_qkv"]
        self.backend.bias_backward(dbias[:C], rows(a.dqkv)[:, :C])
        self.backend.matmul(dbias[2 * C:].reshape(1, C), g[h + "attn.b_o"].reshape(1, C),
                            self.params[h + "attn.w_o"], transpose_b=True)

    def _in_use(self, logits):
        """Rows of logits (rows, V), or of a padded vocabulary the columns of the tokens in
        use: the loss and its gradient see those alone."""
        return logits if self.config.tokens == self.config.vocab_size \
            else logits[:, :self.config.tokens]

    # the public calls: one pass each, on host or backend arrays ----------------------
    def forward(self, idx):
        """idx int (B, T) -> logits (B, T, V), a host numpy array."""
        a = self._load(idx)
        self.enqueue_forward(a)
        logits = np.concatenate([self.backend.to_host(self.enqueue_logits(a, lo, hi))
                                 for lo, hi in self.head_chunks(a)])
        logits = logits.reshape(*idx.shape, -1)
        return logits.view(ml_dtypes.bfloat16).astype(np.float32) if self.precision == "bf16" \
            else logits

    def forward_backward(self, idx, targets, sync=LOCAL):
        """The training pass: gradients land in self.grads (zeroed first; averaged over a
        data-parallel world by sync); returns this process's mean loss as a float."""
        a = self._load(idx, targets, runs=True)
        self.enqueue_forward(a)
        self.enqueue_backward(a, sync)
        return self.backend.mean(a.losses)   # read back last, so the host never waits mid-step

    def loss_and_grads(self, idx, targets):
        """-> (mean loss, {name: gradient as a host numpy array})."""
        loss = self.forward_backward(idx, targets)
        host = self.backend.to_host(self.grads_flat)
        return loss, self.layout.views(host)

    def evaluate(self, idx, targets):
        """Mean loss without a backward pass."""
        a = self._load(idx, targets)
        self.enqueue_forward(a)
        self.enqueue_loss(a)
        return self.backend.mean(a.losses)

    def _load(self, idx, targets=None, runs=False):
        """The model's own (B, T) buffers, reallocated when the shape changes, with the
        token ids (and targets, and for a backward the ids' token_runs, where it takes
        them) copied in. (A training step keeps its own buffers: microgpt.step.Step.)"""
        B, T = self.check_tokens(idx)
        if self._acts is None or self._acts.batch.shape[1:] != (B, T):
            self.check_context(T)
            self._acts = None   # free the old buffers before allocating the new ones
            self._acts = Buffers(self.backend, activation_specs(
                self.config, B, T, self.precision, recompute=self.recompute,
                token_runs=self.token_runs is not None))
        self.backend.copy(self._acts.batch[0], self._host_or_device(idx))
        if runs and self.token_runs:
            host = idx if isinstance(idx, np.ndarray) else self.backend.to_host(idx)
            self.backend.copy(self._acts.batch[2:], self.token_runs(host))
        if targets is not None:
            if tuple(targets.shape) != (B, T):
                raise ValueError(f"targets must match the token ids' shape {(B, T)}, got "
                                 f"{tuple(targets.shape)}")
            self.check_tokens(targets)
            self.backend.copy(self._acts.batch[1], self._host_or_device(targets))
        return self._acts

    def check_tokens(self, idx):
        """-> (B, T) of token ids; host arrays are range-checked here, since the device
        cannot check them without a copy back."""
        if len(idx.shape) != 2:
            raise ValueError(f"token indices must be (B, T), got shape {tuple(idx.shape)}")
        if isinstance(idx, np.ndarray) and idx.size and (
                idx.min() < 0 or idx.max() >= self.config.tokens):
            raise ValueError(f"token indices must lie in [0, {self.config.tokens})")
        return tuple(idx.shape)

    @staticmethod
    def _host_or_device(idx):
        return np.ascontiguousarray(idx, np.int32) if isinstance(idx, np.ndarray) else idx

    # state ------------------------------------------------------------------------
    def state_dict(self):
        """{name: host numpy float32 array}, the checkpoint's tensors."""
        host = self.backend.to_host(self.params_flat).astype(np.float32)
        return {name: v.copy() for name, v in self.layout.views(host).items()}

    def load_state_dict(self, state):
        expected = {s.name: s.shape for s in self.layout.specs}
        missing, unexpected = expected.keys() - state.keys(), state.keys() - expected.keys()
        if missing or unexpected:
            raise ValueError(f"state dict does not match the model: missing {sorted(missing)}, "
                             f"unexpected {sorted(unexpected)}")
        host = np.empty(self.layout.size, np.float32)
        views = self.layout.views(host)
        for name, shape in expected.items():
            if tuple(state[name].shape) != shape:
                raise ValueError(f"parameter {name} has shape {tuple(state[name].shape)}, "
                                 f"the model expects {shape}")
            views[name][...] = state[name]
        # the padding of a vocabulary carries no token: its rows of wte are 0, which keeps
        # its logits, and so their gradients, 0
        views["wte"][self.config.tokens:] = 0.0
        self.backend.copy(self.params_flat, self.backend.to_device(host))
        if self.matrices_flat is not None:
            self._round_matrices()

    def _round_matrices(self, host=None):
        """The bf16 copy of the matrices from the float32 master weights (after init or a
        load; every AdamW step rewrites it in its own pass). host: those weights, where the
        caller holds them on the host (the init: GPT-2-XL's 6 GB need not come back)."""
        if host is None:
            host = self.backend.to_host(self.params_flat)
        host = host[:self.layout.n_decay]
        self.backend.copy(self.matrices_flat,
                          np.ascontiguousarray(host.astype(ml_dtypes.bfloat16).view(np.uint16)))
