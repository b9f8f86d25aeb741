"""Generation: a batch of sequences decoding together against a KV cache of fixed capacity.

The model runs its own blocks (``GPT.enqueue_blocks``); generation only supplies the
attention step and the ends. A prompt's tokens but its last run once, through the
training kernels (the prefill: the model's forward, each block's keys and values copied
into the cache by ``kv_cache_write``); then every step runs one position per sequence:
``decode_embedding`` of each sequence's token at its own position, the blocks with
``attention_decode`` (the new position against the cache, its key and value written
there), and ``sample_tokens``, which draws each sequence's next token on the device and
advances its state. That state (token, position, tokens left, draws: ``SEQ_COLUMNS``) is
a (B, 4) array on the device and no launch argument depends on it, so on a GPU the step
is captured into a CUDA graph once (as a training step is: ``backend.capture``) and
replayed for every token; the one copy back per step is that (B, 4) array, from which
the host streams the new tokens.

Capacity: a sequence's cache holds the model's context of positions (wpe has no more).
A prompt longer than that keeps its newest context tokens. When a sequence's cache is
full its window slides: the newest half of it (context // 2 tokens, the one drawn last
among them) runs again from position 0, a prefill of that sequence alone, and it goes on
from there. Every token is thus predicted from the newest context // 2 to context
tokens, at the cost of one prefill per context // 2 tokens.

The NumPy backend runs the same steps on the reference (its ops), uncaptured: both give
the same tokens at temperature 0 on the same float32 weights.
"""
from collections import deque
from dataclasses import dataclass

import numpy as np

from microgpt.activations import HEAD_ROWS, Buffers, activation_specs
from microgpt.errors import UserError
from microgpt.reference import DRAWN, LEFT, NOT_FINITE, POSITION, SEQ_COLUMNS, TOKEN

AHEAD = 2       # decoding steps enqueued before the host reads a step's tokens
PREFILL_STEP = 64   # prefills longer than this are padded to a multiple, shorter ones to a
                    # power of two: a captured graph serves every prompt of its length


@dataclass(frozen=True)
class Sampling:
    """How a token is drawn: temperature 0 is greedy; top_k 0 and top_p 1 keep every
    token; seed starts the counter-based generator; stop_id (or None) ends a sequence
    (the tokenizer's end of document); vocab_limit (or None): only the first that many
    logits are eligible (the model's vocabulary may be padded beyond the tokenizer's)."""
    temperature: float = 0.8
    top_k: int = 40
    top_p: float = 1.0
    seed: int = 0
    stop_id: int = None
    vocab_limit: int = None

    def check(self, vocab_size):
        if self.temperature < 0 or self.top_k < 0 or not 0 < self.top_p <= 1:
            raise ValueError(f"sampling needs temperature >= 0, top_k >= 0 and top_p in "
                             f"(0, 1], got {self.temperature}, {self.top_k}, {self.top_p}")
        if self.vocab_limit is not None and not 1 <= self.vocab_limit <= vocab_size:
            raise ValueError(f"vocab_limit must lie in [1, {vocab_size}], got "
                             f"{self.vocab_limit}")


def prefill_length(T, context):
    """The positions a prefill of T runs: T padded (PREFILL_STEP), at most context. Eager
    and captured steps pad alike, so that they give the same bits."""
    if T <= PREFILL_STEP:
        return min(context, 1 << (T - 1).bit_length())
    return min(context, -(-T // PREFILL_STEP) * PREFILL_STEP)


class Replayed:
    """enqueue(), whose launches' arguments never change, as one CUDA graph: run eagerly the
    first time (its kernels compile), captured the second, replayed after; eager on every
    call where graphs are off."""

    def __init__(self, ops, enqueue):
        self.ops, self.enqueue = ops, enqueue
        self.ran, self.captured = False, None

    def __call__(self, graph):
        if not graph or not self.ran:
            self.enqueue()
            self.ran = True
            return
        if self.captured is None:
            self.captured = self.ops.capture(self.enqueue)
        self.captured.replay()


class Decoder:
    """B sequences' KV caches, state and step buffers; ``start`` loads prompts, ``step``
    runs one position of every active sequence, ``state`` reads the state back."""

    def __init__(self, model, batch, *, graph=True):
        if batch > HEAD_ROWS:       # (the decode step's head takes its B rows as one chunk)
            raise UserError(f"a batch of {batch} sequences (prompts times --num-samples): "
                            f"generation decodes at most {HEAD_ROWS} at once; give fewer")
        self.model, self.batch = model, batch
        cfg, ops = model.config, model.backend
        self.ops, self.capacity = ops, cfg.context
        low = np.dtype(np.uint16) if model.precision == "bf16" else None    # bf16 bits
        self.kv = [ops.zeros((batch, cfg.context, 2 * cfg.d_model), low)
                   for _ in range(cfg.n_layer)]
        self.seq = ops.zeros((batch, len(SEQ_COLUMNS)), np.dtype(np.int32))
        self.acts = Buffers(ops, activation_specs(cfg, batch, 1, model.precision))
        self._prefills = {}         # (n, T) -> (buffers, slots, its Replayed) of that shape
        self.graph = graph and ops.graphs
        self._steps = {}            # sampling -> its step's Replayed

    def start(self, b, ids, left, drawn=0):
        """Sequence b continues ids (its newest context tokens), with left tokens to draw:
        all of ids but the last run as a prefill into b's cache, the last is the token its
        next step runs."""
        self.start_many([b], [ids], [left], [drawn])

    def start_many(self, slots, prompts, left, drawn):
        """start for several sequences at once: one prefill, their prompts padded to the
        longest (the causal attention never reads a later position, and the padding's
        keys lie beyond each sequence's position, which its steps overwrite)."""
        cfg, ops = self.model.config, self.ops
        prompts = [[int(t) for t in ids][-cfg.context:] for ids in prompts]
        for ids in prompts:
            if not ids:
                raise ValueError("generation needs at least one token to start from")
            if min(ids) < 0 or max(ids) >= cfg.vocab_size:
                raise ValueError(f"token ids must lie in [0, {cfg.vocab_size})")
        T = max(len(ids) for ids in prompts) - 1
        if T > 0:
            n = len(prompts)
            T = prefill_length(T, cfg.context)
            if (n, T) not in self._prefills:
                self._prefills[(n, T)] = self._prefill(n, T)
            a, slots_dev, prefill = self._prefills[(n, T)]
            ids = np.zeros((n, T), np.int32)
            for r, prompt in enumerate(prompts):
                ids[r, :len(prompt) - 1] = prompt[:-1]
            ops.copy(a.batch[0], ids)
            ops.copy(slots_dev, np.array(slots, np.int32))
            prefill(self.graph)
        for b, ids, n_left, n_drawn in zip(slots, prompts, left, drawn):
            ops.copy(self.seq[b], np.array([ids[-1], len(ids) - 1, n_left, n_drawn], np.int32))

    def _prefill(self, n, T):
        """The buffers, slots (n,) on the device and the enqueue (a Replayed) of a prefill
        of n prompts of T tokens, their ids in the buffers' batch[0]: the model's forward,
        each block's keys and values into the cache rows of the slots."""
        ops, model = self.ops, self.model
        a = Buffers(ops, activation_specs(model.config, n, T, model.precision))
        slots = ops.zeros((n,), np.dtype(np.int32))

        def store_then_attend(a, i):        # the prompt's keys and values, then the
            ops.kv_cache_write(self.kv[i], a.qkv[i], slots)         # training attention
            model.enqueue_attention(a, i)

        def enqueue():
            ops.encoder_forward(a.resid[0], a.batch[0], model.params["wte"],
                                model.params["wpe"])
            model.enqueue_blocks(a, attention=store_then_attend)
        return a, slots, Replayed(ops, enqueue)

    def step(self, sampling):
        """Enqueue one position of every active sequence and its draw (captured once per
        sampling on a GPU, replayed after)."""
        def enqueue():
            ops, p, a = self.ops, self.model.params, self.acts
            ops.decode_embedding(a.resid[0], self.seq, p["wte"], p["wpe"])
            self.model.enqueue_blocks(a, attention=self._attend)
            # the head on the B rows at once: one chunk up to activations.HEAD_ROWS sequences
            logits = self.model.enqueue_logits(a, 0, self.batch)
            ops.sample_tokens(self.seq, logits, self.capacity,
                              vocab=sampling.vocab_limit, temperature=sampling.temperature,
                              top_k=sampling.top_k, top_p=sampling.top_p, seed=sampling.seed,
                              stop_id=-1 if sampling.stop_id is None else sampling.stop_id)
        if sampling not in self._steps:
            self._steps[sampling] = Replayed(self.ops, enqueue)
        self._steps[sampling](self.graph)

    def _attend(self, a, i):
        self.ops.attention_decode(a.att_merged[i], self.kv[i], a.qkv[i], self.seq,
                                  self.model.config.n_head)

    def state(self):
        """The (B, 4) state on the host (SEQ_COLUMNS): the one copy back of a step."""
        return self.ops.to_host(self.seq)


def generate(model, prompts, n_tokens, sampling=Sampling(), *, on_token=None, graph=True,
             decoder=None):
    """Extend each prompt (a list of token ids) by up to n_tokens drawn tokens -> the new
    ids of each (lists of int; shorter where sampling.stop_id came, which is kept). All
    prompts decode as one batch, each at its own length; on_token(b, token), if given, is
    called for every token as it comes. decoder: a Decoder of the model for as many
    sequences, to reuse (its buffers and captured steps) from call to call."""
    cfg = model.config
    sampling.check(cfg.vocab_size)
    if n_tokens < 1:
        raise ValueError(f"n_tokens must be at least 1, got {n_tokens}")
    if decoder is None:
        decoder = Decoder(model, len(prompts), graph=graph)
    elif decoder.model is not model or decoder.batch != len(prompts):
        raise ValueError(f"decoder: one of this model for {len(prompts)} sequences is "
                         f"needed, got one for {decoder.batch}")
    B = len(prompts)
    windows = [[int(t) for t in ids][-cfg.context:] for ids in prompts]
    decoder.start_many(list(range(B)), windows, [n_tokens] * B, [0] * B)
    new = [[] for _ in prompts]
    drawn = [0] * B
    slid_at = [None] * B        # the draw count at which a sequence's window last slid
    hosts = [decoder.ops.host_buffer((B, len(SEQ_COLUMNS)), np.int32)
             for _ in range(AHEAD + 1)]
    launched = 0

    def launch():
        """Enqueue a step and its state's copy back -> (event, host buffer)."""
        nonlocal launched
        decoder.step(sampling)
        host = hosts[launched % len(hosts)]
        launched += 1
        return decoder.ops.fetch(host, decoder.seq), host

    # AHEAD steps are enqueued before a step's tokens are read, so the device always has
    # one to run while the host streams them; a step that finds a sequence done, or
    # waiting for its window to slide, leaves it as it is
    pending = deque(launch() for _ in range(min(AHEAD, n_tokens)))
    while pending:
        event, host = pending.popleft()
        event.synchronize()
        state = host.copy()
        if (state[:, LEFT] == NOT_FINITE).any():
            raise UserError("the model's outputs overflow to NaN or infinity: its "
                            "parameters come from a run that diverged; use an earlier "
                            "checkpoint")
        if any(row[LEFT] > len(pending) or (row[LEFT] > 0 and row[POSITION] == decoder.capacity)
               for row in state):
            pending.append(launch())
        for b, row in enumerate(state):
            if row[DRAWN] > drawn[b]:
                drawn[b] = int(row[DRAWN])
                token = int(row[TOKEN])
                new[b].append(token)
                windows[b].append(token)
                if on_token is not None:
                    on_token(b, token)
            if (row[POSITION] == decoder.capacity and row[LEFT] > 0
                    and slid_at[b] != drawn[b]):
                slid_at[b] = drawn[b]
                windows[b] = windows[b][-max(1, cfg.context // 2):]
                decoder.start(b, windows[b], int(row[LEFT]), drawn[b])
    return new
