"""Generation with a KV cache: the prompt in one pass (the prefill), then one position a step.

Each layer keeps the keys and values of the positions seen so far on the model's backend
(``kv_cache_write``, ``attention_cached_forward``: kernels/attention/kv_cache.py on the GPU), so a
step runs the model over one new position, and only the last position's logits, V floats,
come back to the host, where temperature and top-k pick the token (a 200 KB copy for
andrea-120m's 50304 logits: a device-side top-k would save microseconds per token).
The model is read through its parameters (``model.params``) and its backend's ops only.

Positions are absolute (learned wpe), so a window cannot shift by one position: when the
cache is full (context positions), the newest half of the window is run again from
position 0 and generation goes on from there. Every token is thus predicted from the
newest context/2 to context tokens, and the re-run costs one prefill per context/2
tokens, where re-running the full window for every token would cost a forward each.
"""
import numpy as np

from microgpt.errors import UserError


class KVCache:
    """The keys and values of every layer for the window of tokens in it, and the buffers
    of one pass over up to context new positions (batch 1).

    start(ids) runs a prompt (its newest context tokens) from position 0, append(token)
    one more position; both return the last position's logits, a host array (V,)."""

    def __init__(self, model):
        self.model = model
        cfg, ops = model.config, model.backend
        S, C = cfg.context, cfg.d_model
        self.kv = [ops.zeros((1, S, 2 * C)) for _ in range(cfg.n_layer)]   # K | V per row
        # token rows (S, X); a pass over T positions uses the first T rows
        self.x, self.ln, self.att, self.proj = (ops.zeros((S, C)) for _ in range(4))
        self.qkv = ops.zeros((S, 3 * C))
        self.fc = ops.zeros((S, 4 * C))
        self.mean, self.rstd = ops.zeros((S,)), ops.zeros((S,))
        self.logits = ops.zeros((1, cfg.vocab_size))
        self.tokens = []            # the window: the ids whose keys and values are cached

    def start(self, ids):
        """Empty the cache, then run ids[-context:] from position 0."""
        cfg = self.model.config
        ids = [int(t) for t in ids][-cfg.context:]
        if not ids:
            raise ValueError("generation needs at least one token to start from")
        if min(ids) < 0 or max(ids) >= cfg.vocab_size:
            raise ValueError(f"token ids must lie in [0, {cfg.vocab_size})")
        self.tokens = ids
        return self._run(ids, 0)

    def append(self, token):
        """Run one more position; on a full window, restart from its newest half."""
        context = self.model.config.context
        if len(self.tokens) == context:
            return self.start((self.tokens + [token])[-max(1, context // 2):])
        self.tokens.append(int(token))
        return self._run([int(token)], len(self.tokens) - 1)

    def _run(self, ids, start):
        """The model over positions start .. start+T-1 holding ids, their keys and values
        added to the cache -> the logits of the last one (host, (V,))."""
        ops, p, cfg = self.model.backend, self.model.params, self.model.config
        T = len(ids)
        x, ln, att, proj, qkv, fc, mean, rstd = (
            buf[:T] for buf in (self.x, self.ln, self.att, self.proj, self.qkv, self.fc,
                                self.mean, self.rstd))

        def seq(rows):                              # (T, X) -> (1, T, X), a view
            return rows.reshape(1, T, rows.shape[1])

        idx = ops.to_device(np.array([ids], np.int32))
        ops.encoder_forward(seq(x), idx, p["wte"], p["wpe"][start:start + T])
        for i in range(cfg.n_layer):
            h = f"h.{i}."
            ops.layernorm_forward(ln, mean, rstd, x, p[h + "ln_1.weight"], p[h + "ln_1.bias"])
            ops.matmul(qkv, ln, p[h + "attn.w_qkv"])
            ops.kv_cache_write(self.kv[i], seq(qkv), start)
            ops.attention_cached_forward(seq(att), seq(qkv), self.kv[i], start, cfg.n_head)
            ops.matmul(proj, att, p[h + "attn.w_o"])
            ops.residual_forward(x, x, proj)
            ops.layernorm_forward(ln, mean, rstd, x, p[h + "ln_2.weight"], p[h + "ln_2.bias"])
            ops.matmul(fc, ln, p[h + "mlp.w_fc"])
            ops.gelu_forward(fc, fc)
            ops.matmul(proj, fc, p[h + "mlp.w_proj"])
            ops.residual_forward(x, x, proj)
        last = slice(T - 1, T)                      # the LM head runs on the last row only
        ops.layernorm_forward(ln[last], mean[last], rstd[last], x[last], p["ln_f.weight"],
                              p["ln_f.bias"])
        ops.matmul(self.logits, ln[last], p["wte"], transpose_b=True)    # tied head
        return ops.to_host(self.logits)[0]


def pick_token(logits, *, temperature, top_k, rng):
    """One token id from logits (host, (V,)): temperature 0 is greedy, top_k 0 keeps all."""
    logits = logits.astype(np.float64)
    if not np.isfinite(logits).all():
        raise UserError("the model's outputs overflow to NaN or infinity: its parameters "
                        "come from a run that diverged; use an earlier checkpoint")
    if temperature == 0:
        return int(np.argmax(logits))
    logits /= temperature
    if 0 < top_k < logits.size:
        logits[logits < np.partition(logits, -top_k)[-top_k]] = -np.inf
    p = np.exp(logits - logits.max())
    return int(rng.choice(logits.size, p=p / p.sum()))


def generate(model, prompt_ids, n_tokens, *, temperature, top_k, rng, vocab_limit):
    """Extend prompt_ids by n_tokens sampled tokens -> the new ids (a list of int). Only the
    first vocab_limit logits are eligible (the model's vocabulary may be padded beyond the
    tokenizer's)."""
    cache = KVCache(model)
    new = []
    with np.errstate(all="ignore"):         # overflow is reported by pick_token, in one line
        logits = cache.start(prompt_ids)
        for n in range(n_tokens):
            new.append(pick_token(logits[:vocab_limit], temperature=temperature, top_k=top_k,
                                  rng=rng))
            if n + 1 < n_tokens:
                logits = cache.append(new[-1])
    return new
