"""Where the deterministic embedding backward's time goes on the H200, on a text's tokens:
each launch of kernels/embedding.py's sorted backward alone (20 launches captured in a
graph, the best of 3 replays) at andrea-120m's B 16 x 1024, C 768, and the whole at other
blocks and chunks than the launcher's, beside the atomic scatter's whole backward and
session 19's sorted one (batches.session19_backward: kernels/embedding.py at d6ee3c2); session
19's embed_parts.py on batches.py's tokens.

    python3 embed_parts.py VOCABS TOKENS...     # TOKENS: uniform, zipf or a .bin shard
"""
import sys
import time

import numpy as np
from numba import cuda

from batches import batches, describe, session19_backward
from microgpt.cuda_backend import CudaBackend
from microgpt.data import default_cache_dir
from microgpt.kernels import cache as kernel_cache
from microgpt.kernels import embedding as emb
from microgpt.kernels.common import ceil_div, fill_zero

REPS = 20
# the sorted backward's other blocks (a block is also the sort's segment) and chunks
TUNING = [(b, k) for b in (128, 256, 512, 1024) for k in (16, 32, 64)
          if (b, k) != (emb.BLOCK, emb.CHUNK)]
kernel_cache.use(default_cache_dir() / "kernels")
backend = CudaBackend()
session19 = session19_backward()
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
for V in map(int, sys.argv[1].split(",")):
    for source in sys.argv[2:]:
        host = batches(source, V, 1, B, T)[0][0]
        idx = cuda.to_device(host)
        dout = cuda.to_device(rng.standard_normal((B, T, C), np.float32))
        dwte = cuda.device_array((V, C), np.float32)
        dwpe = cuda.device_array((T, C), np.float32)
        N, block, chunk = B * T, emb.BLOCK, emb.CHUNK
        chunks, segments = ceil_div(N, chunk), ceil_div(N, block)
        tokens, rows = idx.reshape(N), dout.reshape(N, C)
        order, sorted_tokens, slots = (cuda.device_array(N, np.int32) for _ in range(3))
        counts, starts = (cuda.device_array(V, np.int32) for _ in range(2))
        hist = cuda.device_array((V, segments), np.int32)
        leads = cuda.device_array((chunks, C), np.float32)
        sums = ceil_div(chunks * C, block)
        starts_kernel = emb._token_starts_kernel[ceil_div(V, emb.SCAN_THREADS),
                                                 emb.SCAN_THREADS, s]

        def ranks():
            fill_zero(counts, s)
            fill_zero(hist, s)
            emb._segment_ranks_kernel[segments, block, s](slots, hist, counts, tokens)

        def sort():
            ranks()
            starts_kernel(starts, counts)
            emb._place_positions_kernel[segments, block, s](order, sorted_tokens, tokens,
                                                            starts, hist, slots, block)
        parts = {
            "atomic backward (whole)": lambda: emb.encoder_backward(dwte, dwpe, dout, idx,
                                                                    stream=s),
            "sorted backward (whole)": lambda: emb.encoder_backward(
                dwte, dwpe, dout, idx, deterministic=True, stream=s),
            "session 19's sorted backward (whole)": lambda: session19(
                dwte, dwpe, dout, idx, deterministic=True, stream=s),
            "segment ranks (with the zeroing)": ranks,
            "token starts": lambda: starts_kernel(starts, counts),
            "place positions": lambda: emb._place_positions_kernel[segments, block, s](
                order, sorted_tokens, tokens, starts, hist, slots, block),
            "the sort (all)": sort,
            "chunk leads": lambda: emb._chunk_leads_kernel[sums, block, s](
                leads, order, sorted_tokens, starts, counts, rows, chunk),
            "run sums": lambda: emb._run_sums_kernel[sums, block, s](
                dwte, leads, order, sorted_tokens, starts, counts, rows, chunk),
            "position sums": lambda: emb._position_sums_kernel[ceil_div(T * C, block), block, s](
                dwpe, dout),
        }
        for other_block, other_chunk in TUNING:
            parts[f"sorted backward (whole), block {other_block}, chunk {other_chunk}"] = (
                lambda b=other_block, k=other_chunk: emb.encoder_backward(
                    dwte, dwpe, dout, idx, deterministic=True, stream=s, block=b, chunk=k))
        sort()
        print(f"V {V}, {source} tokens ({describe(host)}):", flush=True)
        for name, launch in parts.items():
            print(f"  {name}: {ms(launch):.4f} ms", flush=True)
