"""The activations of a forward + backward pass: every buffer the model's passes write,
declared in one table (activation_specs) and allocated once per batch shape (Buffers), as
one arena whose parts the phases of the step share where their lives do not overlap.
microgpt.model's GPT walks them; microgpt.step.Step and microgpt.generate declare their
own from the same table.
"""
import math
from dataclasses import dataclass

import numpy as np

# ----------------------------------------------------------------------------------
# activations: declared in one table, allocated once per (B, T)

PRECISIONS = ("fp32", "bf16")

# what the backward writes again rather than the forward keeping it per layer (GPT's
# recompute), each an operand of a dW GEMM: nothing; GELU's output alone (fc_gelu, N x 4C,
# the largest, 8·C bytes a token a layer in bf16); or the LayerNorms' outputs too (2·C
# each). The first is the fastest, the last the smallest (docs/kernels-step.md, "Memory")
RECOMPUTED = {"off": (), "gelu": ("fc_gelu",), "all": ("ln_1", "ln_2", "fc_gelu")}
RECOMPUTE_MODES = tuple(RECOMPUTED)


def recompute_mode(value):
    """A recompute mode of RECOMPUTE_MODES, from one or a bool (True: "all", as the
    switch once was; False or None: "off")."""
    if value is None or isinstance(value, bool):
        return "all" if value else "off"
    if value not in RECOMPUTED:
        raise ValueError(f"recompute must be one of {', '.join(RECOMPUTE_MODES)}, got "
                         f"{value!r}")
    return value


@dataclass(frozen=True)
class BufferSpec:
    name: str
    shape: tuple
    dtype: str = None       # None: the backend's float type; "uint16": bf16 bits
    per_layer: int = 0      # > 0: a list of that many buffers (one per layer, or L + 1)
    same_as: str = None     # not a buffer of its own: another name for that one (for a
                            # reused one, its buffer)
    reused: bool = False    # per_layer: one buffer in every place of the list (scratch)
    heads_of: tuple = None  # not a buffer of its own: (name, part), the (B, H, T, D) view
                            # of that part of that buffer's fused rows (per layer alike)
    phase: tuple = None     # not a buffer of its own: a part of the arena, alive only in
                            # this phase of a pass (arena_layout); per_layer: the one
                            # part in every place of the list

    @property
    def allocations(self):
        """How many arrays of its own the spec allocates: none for another name, a view or
        a part of the arena, one for scratch that every place of the list shares, else one
        per place."""
        if self.same_as is not None or self.heads_of is not None or self.phase is not None:
            return 0
        return 1 if self.reused else self.per_layer or 1

    @property
    def nbytes(self):
        """The device memory the spec allocates (the backend's float type is float32)."""
        return self.allocations * self.bytes_each

    @property
    def bytes_each(self):
        itemsize = np.dtype(self.dtype).itemsize if self.dtype else 4
        return math.prod(self.shape) * itemsize


ARENA_ALIGN = 64        # elements of float32 between two parts of the arena: 256 bytes


def arena_layout(specs):
    """-> ({name: offset} of the arena's parts, the arena's length), in elements of the
    backend's float type (a bf16 part takes half an element a value: bf16 runs on float32
    backends alone). A part's phase is a path: ("head",), ("blocks",), ("blocks",
    "forward"), ("blocks", "backward", "mlp"), ... The parts of one phase lie end to end,
    after those of the phase that holds it (declared first), and beside those of every
    other phase, whose lives do not overlap theirs: the head's chunk of logits takes the
    memory that the blocks' scratch takes in the forward and the rest of the backward."""
    offsets, end = {}, {(): 0}
    for s in specs:
        if s.phase is None:
            continue
        holder = next(s.phase[:k] for k in range(len(s.phase), -1, -1) if s.phase[:k] in end)
        offsets[s.name] = end[holder]
        end[s.phase] = end[holder] + -(-s.bytes_each // (4 * ARENA_ALIGN)) * ARENA_ALIGN
    return offsets, max(end.values())


def activation_specs(cfg, B, T, precision="fp32", recompute="off", token_runs=False):
    """Every buffer a forward + backward pass of shape (B, T) writes; the logits of a chunk
    of the N token rows at a time (head_rows), which the head and the loss walk. In bf16 the arrays a
    matmul or attention reads are bf16 (fc too, which the GELU backward reads, and dfc,
    the w_fc GEMMs' operand), and the backward keeps bf16 copies of two float32 gradients
    for the GEMMs; in fp32 those copies are the gradients themselves.

    The heads: in fp32 q, k, v and the attention's output (and their gradients) are
    arrays of their own, (B, H, T, D), each head's T x D slice contiguous, which the split
    and merge copies fill from the fused rows and back (the float32 attention reads
    whole heads). In bf16 they are views of the fused rows (heads_of): flash attention
    reads and writes rows a pitch apart, and the copies vanish; so qkv, scratch in fp32,
    is kept per layer in bf16, in the place q, k, v held.

    recompute: a mode of RECOMPUTE_MODES: which of the LayerNorms' and GELU's outputs
    (ln_1, ln_2, fc_gelu, each the operand of a GEMM) are not kept per layer for the
    backward's dW GEMMs but written again there, by the kernels that already read their
    inputs (GPT's recompute): none ("off"), fc_gelu ("gelu"), or all three ("all").

    token_runs: the batch carries, after the token ids and targets, the ids' sort that the
    deterministic embedding backward walks (kernels.embedding.token_runs), made on the host
    as the batch is copied in."""
    C, H, D, V, L = cfg.d_model, cfg.n_head, cfg.head_dim, cfg.vocab_size, cfg.n_layer
    N = B * T
    low = "uint16" if precision == "bf16" else None     # what feeds a matmul or attention
    # the arena's phases: the blocks' (forward and backward), and the head's beside them
    blocks = ("blocks",)
    forward, backward = blocks + ("forward",), blocks + ("backward",)
    mlp, attention = backward + ("mlp",), backward + ("attention",)
    # the LayerNorms' and GELU's outputs, each the operand of a GEMM: kept per layer, or
    # (those the mode recomputes) scratch of the arena in every layer's place, which the
    # backward writes again for its dW GEMMs
    recomputed = RECOMPUTED[recompute_mode(recompute)]

    def kept(name):
        return dict(per_layer=L, phase=blocks if name in recomputed else None)

    def copy_of(name, shape, of, phase):
        return (BufferSpec(name, shape, low, phase=phase) if low
                else BufferSpec(name, shape, same_as=of))

    def heads(name, of, part, per_layer=0):
        if low:
            return BufferSpec(name, (B, H, T, D), per_layer=per_layer, heads_of=(of, part))
        return BufferSpec(name, (B, H, T, D), per_layer=per_layer)
    specs = [
        # token ids and targets (and token_runs' two rows): one copy in
        BufferSpec("batch", (4 if token_runs else 2, B, T), "int32"),
        BufferSpec("resid", (B, T, C), per_layer=L + 1),   # each block's input, the output
        BufferSpec("ln_1", (B, T, C), low, **kept("ln_1")),
        BufferSpec("ln_1_mean", (N,), per_layer=L),
        BufferSpec("ln_1_rstd", (N,), per_layer=L),
        BufferSpec("qkv", (B, T, 3 * C), low, per_layer=L, reused=not low),
        heads("q", "qkv", 0, per_layer=L),
        heads("k", "qkv", 1, per_layer=L),
        heads("v", "qkv", 2, per_layer=L),
        BufferSpec("att_merged", (B, T, C), low, per_layer=L),
        heads("att", "att_merged", 0, per_layer=L),
        BufferSpec("att_lse", (B, H, T), per_layer=L),
        BufferSpec("mid", (B, T, C), per_layer=L),          # resid + attention
        BufferSpec("ln_2", (B, T, C), low, **kept("ln_2")),
        BufferSpec("ln_2_mean", (N,), per_layer=L),
        BufferSpec("ln_2_rstd", (N,), per_layer=L),
        BufferSpec("fc", (B, T, 4 * C), low, per_layer=L),
        BufferSpec("fc_gelu", (B, T, 4 * C), low, **kept("fc_gelu")),
        BufferSpec("ln_f", (B, T, C), low),
        BufferSpec("ln_f_mean", (N,)),
        BufferSpec("ln_f_rstd", (N,)),
        BufferSpec("losses", (N,)),
        BufferSpec("logits_lse", (N,)),                     # evaluation's (enqueue_loss)
        BufferSpec("dresid", (B, T, C)),            # zeroed by a memset: not in the arena
        BufferSpec("dln", (B, T, C)),               # the head's dX writes it: nor this one
        # the arena's parts: the head's chunk of logits (the start of the backward, and
        # evaluation's loss) beside the blocks' scratch, reused by every layer
        BufferSpec("logits", (head_rows(N), V), low, phase=("head",)),  # then dlogits
        # in fp32 proj is dmerged too, the attention backward's
        BufferSpec("proj", (B, T, C), phase=forward if low else attention),
        copy_of("dresid_mm", (B, T, C), "dresid", backward),  # dresid as GEMMs read it
        BufferSpec("dfc", (B, T, 4 * C), low, phase=mlp),   # the gradient of fc
        copy_of("dmerged", (B, T, C), "proj", attention),   # the W_O dX
        heads("datt", "dmerged", 0),
        # in fp32 the qkv scratch again: its rows are copied into q, k, v before the
        # backward needs the room
        BufferSpec("dqkv", (B, T, 3 * C), low, phase=attention) if low else
        BufferSpec("dqkv", (B, T, 3 * C), same_as="qkv"),
        heads("dq", "dqkv", 0),
        heads("dk", "dqkv", 1),
        heads("dv", "dqkv", 2),
        BufferSpec("att_delta", (B, H, T), phase=attention),  # rowsum(datt * att), float32
    ]
    return specs + [BufferSpec("arena", (arena_layout(specs)[1],))]


class Buffers:
    """A table of BufferSpecs allocated on a backend: one attribute per name (a list for
    per-layer buffers). heads_in_place: whether the heads are views of the fused rows
    (bf16), so that no copy splits or merges them."""

    def __init__(self, backend, specs):
        self.specs = specs
        for s in specs:
            if s.allocations:
                bufs = [backend.zeros(s.shape, s.dtype and np.dtype(s.dtype))
                        for _ in range(s.allocations)]
                setattr(self, s.name, bufs * s.per_layer if s.reused else
                        bufs if s.per_layer else bufs[0])
        offsets, _ = arena_layout(specs)
        for s in specs:
            if s.phase is not None:     # a view of the arena's elements from its offset
                dtype = np.dtype(s.dtype) if s.dtype else self.arena.dtype
                n = math.prod(s.shape)
                units = -(-n * dtype.itemsize // self.arena.dtype.itemsize)
                part = self.arena[offsets[s.name]:offsets[s.name] + units].view(dtype)
                part = part[:n].reshape(s.shape)
                setattr(self, s.name, [part] * s.per_layer if s.per_layer else part)
        # per-layer names whose places are one part of the arena: what the forward wrote
        # there is gone by the backward, which writes it again before reading it
        self.rewritten = {s.name for s in specs if s.phase is not None and s.per_layer}
        reused = {s.name for s in specs if s.reused}
        for s in specs:
            if s.same_as is not None:      # another name; for a reused list, its one buffer
                other = getattr(self, s.same_as)
                setattr(self, s.name, other[0] if s.same_as in reused and not s.per_layer
                        else other)
            elif s.heads_of is not None:
                of, part = s.heads_of
                fused = getattr(self, of)
                H, D = s.shape[1], s.shape[3]
                setattr(self, s.name, [backend.heads_view(f, part, H, D) for f in fused]
                        if s.per_layer else backend.heads_view(fused, part, H, D))
        self.heads_in_place = any(s.heads_of for s in specs)

    def arrays(self):
        """(name, array) for every buffer, per-layer ones named name.i (a reused one once);
        a name that is another's (same_as), a view of one (heads_of) or a part of the arena
        is left out."""
        for s in self.specs:
            if not s.allocations:
                continue
            value = getattr(self, s.name)
            if s.reused:
                yield s.name, value[0]
            elif s.per_layer:
                yield from ((f"{s.name}.{i}", buf) for i, buf in enumerate(value))
            else:
                yield s.name, value


# the most token rows the head takes at once: andrea-120m's and andrea-12m's 16 x 1024 and
# 64 x 256 in two chunks (786 and 64 MiB of bf16 logits held, not 1.5 GiB and 128 MiB),
# each chunk's products still thousands of rows long (docs/kernels-step.md, "Memory")
HEAD_ROWS = 8192


def head_rows(N):
    """The rows of a chunk of the head over N token rows: all N up to HEAD_ROWS, else N in
    as few equal chunks as keep each within it, rounded up to a multiple of 8 rows (each
    chunk's first row then starts on a 16-byte boundary of any matrix of bf16 rows, as
    the bulk tensor copies need)."""
    parts = -(-N // HEAD_ROWS)
    if parts == 1:
        return N
    per_part = -(-N // parts)
    return min(N, -(-per_part // 8) * 8)
