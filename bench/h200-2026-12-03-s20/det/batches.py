"""The token batches the s20 det benchmarks time on: drawn uniformly, by a Zipf law (s 1.2,
as session 19's embed_parts.py drew them), or a text's, windows of a token shard at random
offsets by the trainer's BatchLoader (the convergence runs' shards: $DATA/train.bin on the
H200's machine); and session 19's embedding backward, to time beside today's."""
from pathlib import Path

import numpy as np

from microgpt.data import BatchLoader, read_shard


def batches(source, vocab, count, B, T, seed=0):
    """-> count (inputs, targets) int32 (B, T); source 'uniform', 'zipf' or a shard path."""
    rng = np.random.default_rng(seed)
    if source == "uniform":
        draw = lambda: rng.integers(0, vocab, (B, T + 1))
    elif source == "zipf":
        draw = lambda: np.minimum(rng.zipf(1.2, (B, T + 1)) - 1, vocab - 1)
    else:
        loader = BatchLoader([read_shard(Path(source))], B, T, vocab, seed)
        pairs = [loader.next_batch() for _ in range(count)]
        # contiguous, as a copy to the device needs (the loader's are views of one window)
        return [tuple(np.ascontiguousarray(a) for a in pair) for pair in pairs]
    rows = [draw().astype(np.int32) for _ in range(count)]
    return [(np.ascontiguousarray(r[:, :-1]), np.ascontiguousarray(r[:, 1:])) for r in rows]


def session19_backward():
    """kernels/embedding.py's encoder_backward as session 19 left it (at d6ee3c2), from
    embedding_s19.py beside this file (not committed: made by the line below)."""
    try:
        import embedding_s19
    except ModuleNotFoundError:
        raise SystemExit("embedding_s19.py is missing; make it with: git show "
                         "d6ee3c2:kernels/embedding.py | sed 's/^from \\.\\([a-z_]*\\) import/"
                         "from microgpt.kernels.\\1 import/' > embedding_s19.py") from None
    return embedding_s19.encoder_backward


def describe(inputs):
    """How skewed a batch is: its distinct tokens and the commonest's count."""
    return (f"{len(np.unique(inputs))} distinct, the commonest "
            f"{np.bincount(inputs.ravel()).max()} times in {inputs.size}")
