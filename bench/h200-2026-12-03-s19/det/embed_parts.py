"""Where the deterministic embedding backward's time goes on the H200: each launch of
kernels/embedding.py's sorted backward (the counting sort) alone (20 launches captured in a graph, the best of
3 replays), at andrea-120m's B 16 x 1024, C 768, for tokens drawn uniformly and by a Zipf
law (a text's), beside the atomic scatter's whole backward.

    python3 embed_parts.py [VOCABS] [LAWS]     # e.g. 4096,50304 uniform,zipf
"""
import sys
import time

import numpy as np
from numba import cuda

from microgpt.cuda_backend import CudaBackend
from microgpt.data import default_cache_dir
from microgpt.kernels import cache as kernel_cache
from microgpt.kernels import embedding as emb
from microgpt.kernels.common import ceil_div, fill_zero

REPS = 20
kernel_cache.use(default_cache_dir() / "kernels")
backend = CudaBackend()
s = backend.stream


def ms(launch):
    launch()
    backend.synchronize()
    graph = backend.capture(lambda: [launch() for _ in range(REPS)])
    best = np.inf
    for _ in range(3):
        backend.synchronize()
        t0 = time.perf_counter()
        graph.replay()
        backend.synchronize()
        best = min(best, (time.perf_counter() - t0) / REPS)
    return best * 1e3


B, T, C = 16, 1024, 768
rng = np.random.default_rng(0)
for V in map(int, (sys.argv[1] if len(sys.argv) > 1 else "4096,50304").split(",")):
    for law in (sys.argv[2] if len(sys.argv) > 2 else "uniform,zipf").split(","):
        if law == "uniform":
            host = rng.integers(0, V, (B, T))
        else:
            host = np.minimum(rng.zipf(1.2, (B, T)) - 1, V - 1)
        idx = cuda.to_device(host.astype(np.int32))
        dout = cuda.to_device(rng.standard_normal((B, T, C), np.float32))
        dwte = cuda.device_array((V, C), np.float32)
        dwpe = cuda.device_array((T, C), np.float32)
        N, block, chunk = B * T, emb.BLOCK, emb.CHUNK
        chunks = ceil_div(N, chunk)
        tokens, rows = idx.reshape(N), dout.reshape(N, C)
        order, sorted_tokens, slots, buckets = (cuda.device_array(N, np.int32)
                                                for _ in range(4))
        counts, starts = (cuda.device_array(V, np.int32) for _ in range(2))
        leads = cuda.device_array((chunks, C), np.float32)
        grid = ceil_div(N, block)

        def sort():
            fill_zero(counts, s)
            emb._count_tokens_kernel[grid, block, s](counts, slots, tokens)
            emb._token_starts_kernel[1, emb.SCAN_THREADS, s](starts, counts)
            emb._bucket_positions_kernel[grid, block, s](buckets, tokens, starts, slots)
            emb._sort_buckets_kernel[grid, block, s](order, sorted_tokens, buckets, tokens,
                                                     starts, counts)
        parts = {
            "atomic backward (whole)": lambda: emb.encoder_backward(dwte, dwpe, dout, idx,
                                                                    stream=s),
            "sorted backward (whole)": lambda: emb.encoder_backward(
                dwte, dwpe, dout, idx, deterministic=True, stream=s),
            "zero counts": lambda: fill_zero(counts, s),
            "count tokens (with the zeroing)": lambda: (
                fill_zero(counts, s), emb._count_tokens_kernel[grid, block, s](counts, slots,
                                                                               tokens)),
            "token starts": lambda: emb._token_starts_kernel[1, emb.SCAN_THREADS, s](starts,
                                                                                    counts),
            "bucket positions": lambda: emb._bucket_positions_kernel[grid, block, s](
                buckets, tokens, starts, slots),
            "sort buckets": lambda: emb._sort_buckets_kernel[grid, block, s](
                order, sorted_tokens, buckets, tokens, starts, counts),
            "the sort (all five)": sort,
            "chunk leads": lambda: emb._chunk_leads_kernel[ceil_div(chunks * C, block), block, s](
                leads, order, sorted_tokens, rows, chunk),
            "run sums": lambda: emb._run_sums_kernel[ceil_div(chunks * C, block), block, s](
                dwte, leads, order, sorted_tokens, rows, chunk),
            "position sums": lambda: emb._position_sums_kernel[ceil_div(T * C, block), block, s](
                dwpe, dout),
        }
        sort()
        print(f"V {V}, {law} tokens ({len(np.unique(host))} distinct, the commonest "
              f"{np.bincount(host.ravel()).max()} times):", flush=True)
        for name, launch in parts.items():
            print(f"  {name}: {ms(launch):.4f} ms", flush=True)
