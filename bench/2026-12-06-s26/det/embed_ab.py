"""The embedding's backward alone at a config's batch, on a text's tokens: the atomic
scatter (the default), session 24's deterministic backward (embedding_s24.py) and main's
(kernels/embedding.py), each of main's two launches alone, and main's at other chunks and
part rows; each way REPS launches captured in a graph, the best of 5 replays. Every
deterministic way is first checked: two launches into zeroed gradients the same bits,
and within 1e-5 of float64 (the norm of the difference over the reference's).

    python3 embed_ab.py CONFIG B T VOCAB TOKENS      # TOKENS: uniform, zipf or a .bin shard
"""
import os
import sys
import time

import numpy as np
from numba import cuda

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "tools"))
sys.path.insert(0, HERE)
import embedding_s24  # noqa: E402
from benchmarks.token_batches import batches, describe  # noqa: E402

from microgpt import get_config  # noqa: E402
from microgpt.cuda_backend import CudaBackend  # noqa: E402
from microgpt.data import default_cache_dir  # noqa: E402
from microgpt.kernels import cache as kernel_cache  # noqa: E402
from microgpt.kernels import embedding as emb  # noqa: E402
from microgpt.kernels.common import SIMULATOR, ceil_div, fill_zero, kept_with  # noqa: E402
from microgpt.kernels.precision import group_width  # noqa: E402

REPS = 20
CONFIG, B, T, VOCAB, TOKENS = sys.argv[1], *map(int, sys.argv[2:5]), sys.argv[5]
# (chunk, part rows) other than the launcher's
OTHERS = [(c, p) for c, p in [(8, 16), (32, 16), (16, 8), (16, 32), (16, 4), (8, 8)]
          if (c, p) != (emb.CHUNK, emb.PART_ROWS)]
kernel_cache.use(default_cache_dir() / "kernels")
backend = CudaBackend()
s = backend.stream
C = get_config(CONFIG, vocab_size=VOCAB).d_model
rng = np.random.default_rng(0)
host = batches(TOKENS, VOCAB, 1, B, T)[0][0]
dout_host = rng.standard_normal((B, T, C), np.float32)
idx, dout = cuda.to_device(host), cuda.to_device(dout_host)
runs = cuda.to_device(emb.token_runs(host))
dwte = cuda.to_device(np.zeros((VOCAB, C), np.float32))
dwpe = cuda.to_device(np.zeros((T, C), np.float32))
print(f"{CONFIG}: B {B} x T {T}, C {C}, vocab {VOCAB}, {TOKENS} tokens ({describe(host)})",
      flush=True)


def ms(launch):
    launch()
    backend.synchronize()
    if SIMULATOR:       # (a dry run: the launch ran once)
        return 0.0
    graph = backend.capture(lambda: [launch() for _ in range(REPS)])
    best = np.inf
    for _ in range(5):
        backend.synchronize()
        t0 = time.perf_counter()
        graph.replay()
        backend.synchronize()
        best = min(best, (time.perf_counter() - t0) / REPS)
    return best * 1e3


def checked(name, launch):
    """Two launches into zeroed gradients: the same bits, and within 1e-5 of float64."""
    got = []
    for _ in range(2):
        fill_zero(dwte, s)
        fill_zero(dwpe, s)
        launch()
        got.append((backend.to_host(dwte), backend.to_host(dwpe)))
    same = all(np.array_equal(a.view(np.uint32), b.view(np.uint32)) for a, b in zip(*got))
    errors = [np.linalg.norm(g - r) / np.linalg.norm(r) for g, r in zip(got[0], reference)]
    print(f"  {name}: same bits twice {same}, dwte {errors[0]:.1e}, dwpe {errors[1]:.1e} "
          f"of float64", flush=True)
    if not same or max(errors) > 1e-5:
        print(f"FAILED: {name}", flush=True)
        sys.exit(1)


ref_wte = np.zeros((VOCAB, C))
np.add.at(ref_wte, host.reshape(-1), dout_host.reshape(-1, C).astype(np.float64))
reference = (ref_wte, dout_host.astype(np.float64).sum(axis=0))

ways = {"atomic scatter (the default)": lambda: emb.encoder_backward(dwte, dwpe, dout, idx,
                                                                      stream=s),
        "session 24's deterministic backward": lambda: embedding_s24.encoder_backward(
            dwte, dwpe, dout, idx, runs, deterministic=True, stream=s),
        f"main's deterministic backward (chunk {emb.CHUNK}, part rows {emb.PART_ROWS})":
            lambda: emb.encoder_backward(dwte, dwpe, dout, idx, runs, deterministic=True,
                                         stream=s)}
for chunk, part_rows in OTHERS:
    ways[f"main's at chunk {chunk}, part rows {part_rows}"] = (
        lambda chunk=chunk, part_rows=part_rows: emb.encoder_backward(
            dwte, dwpe, dout, idx, runs, deterministic=True, stream=s, chunk=chunk,
            part_rows=part_rows))
print("checks:", flush=True)
for name, launch in list(ways.items())[1:]:
    checked(name, launch)

# main's two launches alone (the launcher's arguments, its scratch)
N, chunks, parts = B * T, ceil_div(B * T, emb.CHUNK), ceil_div(B, emb.PART_ROWS)
scratch = [kept_with(dwte, ("encoder " + name, shape), None)
           for name, shape in (("heads", (chunks, C)), ("tails", (chunks, C)),
                               ("position parts", (parts, T, C)))]
heads, tails, position_parts = scratch
width = group_width(C, dwte, dwpe, dout, *scratch)
groups = C // width
args = (dwte, dwpe, position_parts, heads, tails)
order, ends, tokens = runs[0].reshape(N), runs[1].reshape(N), idx.reshape(N)
sums = emb._sums_kernel(width, emb.CHUNK, emb.PART_ROWS)
carries = emb._carries_kernel(width, emb.CHUNK)
ways["main's first launch (position and chunk sums)"] = lambda: sums[
    ceil_div((parts * T + chunks) * groups, emb.BLOCK), emb.BLOCK, s](
    *args, dout, dout.reshape(N, C), order, ends, tokens)
ways["main's second launch (parts, tails and heads)"] = lambda: carries[
    ceil_div(((T if parts > 1 else 0) + chunks) * groups, emb.BLOCK), emb.BLOCK, s](
    *args, order, ends, tokens)
print(f"ms a launch, {REPS} captured, best of 5 replays (width {width}):", flush=True)
for name, launch in ways.items():
    print(f"  {name}: {ms(launch):.4f}", flush=True)
