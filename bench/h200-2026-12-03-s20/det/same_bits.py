"""The deterministic embedding backward on the H200 at andrea-120m's B 16 x 1024, C 768,
vocab 4096, on a text's tokens and a Zipf law's: the sorted order is NumPy's stable
argsort of the tokens; dwte and dwpe within 1e-5 (relative, in norm) of the float64
reference; the same bits at every block (the sort's segment) and launch, and where each
run's chunks are the same (a chunk changes the order of the adds: other bits, as close).

    python3 same_bits.py TOKENS...      # uniform, zipf or a .bin shard
"""
import sys

import numpy as np
from numba import cuda

from batches import batches, describe
from microgpt import reference as ref
from microgpt.cuda_backend import CudaBackend
from microgpt.data import default_cache_dir
from microgpt.kernels import cache as kernel_cache
from microgpt.kernels import embedding as emb
from microgpt.kernels.common import kept_with

kernel_cache.use(default_cache_dir() / "kernels")
backend = CudaBackend()
B, T, C, V = 16, 1024, 768, 4096
rng = np.random.default_rng(1)
failed = 0
for source in sys.argv[1:]:
    idx = batches(source, V, 1, B, T)[0][0]
    dout = rng.standard_normal((B, T, C)).astype(np.float32)
    want = ref.encoder_backward(dout.astype(np.float64), idx, V, T)
    d_idx, d_dout = cuda.to_device(idx), cuda.to_device(dout)
    print(f"{source} tokens ({describe(idx)}):", flush=True)
    first = {}
    for block, chunk in ((256, 32), (128, 32), (1024, 32), (256, 32), (256, 16), (512, 64)):
        dwte = cuda.to_device(np.zeros((V, C), np.float32))
        dwpe = cuda.to_device(np.zeros((T, C), np.float32))
        emb.encoder_backward(dwte, dwpe, d_dout, d_idx, deterministic=True, block=block,
                             chunk=chunk, stream=backend.stream)
        backend.synchronize()
        got = dwte.copy_to_host(), dwpe.copy_to_host()
        order = kept_with(dwte, ("encoder order", B * T), None).copy_to_host()
        errors = [float(np.linalg.norm(g - w) / np.linalg.norm(w)) for g, w in zip(got, want)]
        stable = np.array_equal(order, np.argsort(idx.ravel(), kind="stable"))
        same = (all(np.array_equal(g.view(np.uint32), f.view(np.uint32))
                    for g, f in zip(got, first[chunk])) if chunk in first else None)
        first.setdefault(chunk, got)
        ok = stable and max(errors) < 1e-5 and same is not False
        failed += not ok
        print(f"  block {block}, chunk {chunk}: sorted order stable {stable}, relative error "
              f"dwte {errors[0]:.2e} dwpe {errors[1]:.2e}, the same bits as the first of its "
              f"chunk: {same}{'' if ok else '  FAILED'}", flush=True)
print("FAILED" if failed else "all passed", flush=True)
sys.exit(1 if failed else 0)
