"""ZeRO-1: the optimizer's state sharded over the data-parallel ranks (``--zero 1``).

Plain data parallelism keeps the whole AdamW state on every rank: the moments m and v,
8 bytes a parameter, which a world of W ranks holds W times. ZeRO-1 (stage 1 of ZeRO,
Rajbhandari et al., 2020; what llm.c's multi-GPU trainer shards) gives each rank one
contiguous shard of the flat parameter buffer (Shards) and the moments of that shard
alone. A step then goes:

1. The backward hands each range of the gradient to the world's sharded gradient sync
   as it becomes final, as under plain data parallelism (model.enqueue_backward); the
   sync reduces each piece of the range to the rank that owns it (the mean over the
   ranks, on that rank only) instead of all-reducing it everywhere: the reduce-scatter
   of the gradient, in the backward's buckets, overlapped with the backward.
2. Each rank sums the squares of its shard of the mean gradient; one small collective
   adds the ranks' sums (sync.total), so every rank clips by the same norm, the same bits.
3. AdamW on the shard: the float32 parameters, the moments and the bf16 copy of the
   matrices, the very launches of optim.AdamW on the shard's span.
4. The updated parameters go from each shard's owner to every rank (sync.gather: the
   float32 parameters and, in bf16, the matrices' copy), so every rank holds the whole
   model for the next forward.

On the cuda backend the reduces run on the sync's own stream, beside the backward
(distributed.NCCLShardedGradients); the total and the gathers on the compute stream, in
the captured step. On numpy they run over MPI at once (distributed.MPIShardedGradients).

A checkpoint holds the whole moments, as a world of one writes them: every rank sends its
shard to rank 0, which writes (state_dict). A checkpoint therefore resumes at any world
size, with or without ZeRO (load_state_dict takes the shard of the whole).
"""
from microgpt.optim import AdamW

# shard bounds are multiples of this many elements (256 bytes of float32, 128 of bf16):
# every piece NCCL is handed starts aligned
ALIGN = 64


class Shards:
    """The ranks' shares of a flat buffer of n elements: rank r owns [bounds[r],
    bounds[r + 1]), contiguous and in rank order, about n / world_size each, every bound
    but n a multiple of ALIGN (so a small buffer may leave the last ranks nothing)."""

    def __init__(self, n, world_size, rank):
        step = -(-n // (world_size * ALIGN)) * ALIGN       # ceil(n / world_size), aligned
        self.bounds = [min(n, r * step) for r in range(world_size)] + [n]
        self.rank, self.world_size = rank, world_size

    def span(self, rank=None):
        """(lo, hi): the range a rank owns (this one's by default)."""
        r = self.rank if rank is None else rank
        return self.bounds[r], self.bounds[r + 1]

    def owners(self, lo, hi):
        """[(rank, a, b)]: [lo, hi) cut where the shards meet, each piece with its owner
        (empty pieces left out)."""
        pieces = []
        for r in range(self.world_size):
            a, b = max(lo, self.bounds[r]), min(hi, self.bounds[r + 1])
            if a < b:
                pieces.append((r, a, b))
        return pieces


class ShardedAdamW(AdamW):
    """AdamW on this rank's shard (the moments of the shard alone), with the collectives
    of ZeRO-1 around its launches. sync is the world's sharded gradient sync
    (world.sharded_sync(model, shards)): the Step hands it to the backward, and the update
    asks it for the norm's total and the parameters' gather."""

    def __init__(self, model, cfg, world):
        self.shards = Shards(model.layout.size, world.world_size, world.rank)
        self.sync = world.sharded_sync(model, self.shards)
        self.world = world
        super().__init__(model, cfg, span=self.shards.span())
        self._norm_part = model.backend.zeros((1,))

    def _norm_squared(self, grads):
        """The shard's squared sum, then every rank's added: the whole gradient's."""
        self.model.backend.global_norm_squared(self._norm_part, grads)
        self.sync.total(self.norm_squared, self._norm_part)

    def _update(self):
        super()._update()
        self.sync.gather()

    def state_dict(self):
        """A collective (every rank calls it): rank 0 gets the whole moments, as a world
        of one's state_dict has them; the other ranks get None for them."""
        ops = self.model.backend
        moments = {name: self.world.gather_shards(ops.to_host(getattr(self, name)), self.shards)
                   for name in ("m", "v")}
        return (moments if self.world.rank == 0 else None), {"step": self.step_count}
