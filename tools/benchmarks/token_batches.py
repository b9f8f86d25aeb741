"""The token batches the bench scripts step on: drawn uniformly, by a Zipf law (s 1.2), or
a text's (windows of a token shard at random offsets, by the trainer's BatchLoader: the
convergence runs' shards, $DATA/train.bin on the H200's machine). A text's tokens are
skewed, which the embedding's backward feels (many rows into one token's gradient) and
uniform ones hide."""
from pathlib import Path

import numpy as np


def batches(source, vocab, count, B, T, seed=0):
    """-> count (inputs, targets) int32 (B, T), C-contiguous; source "uniform", "zipf" or
    a shard's path."""
    from microgpt.data import BatchLoader, read_shard

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


def describe(inputs):
    """How skewed a batch is: its distinct tokens and the commonest's count."""
    return (f"{len(np.unique(inputs))} distinct, the commonest "
            f"{np.bincount(inputs.ravel()).max()} times in {inputs.size}")
