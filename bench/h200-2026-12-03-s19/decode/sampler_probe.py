"""sample_tokens at andrea-120m's 50,304 bf16 logits, batch 1, each launch's time in a CUDA
graph (20 captured back to back, the fastest of 20 replays): greedy, top-k 40, top-p 0.9."""
import sys, warnings
sys.path.insert(0, "tools")     # run from the repository root
import numpy as np
from numba import cuda
from numba.core.errors import NumbaPerformanceWarning
warnings.simplefilter("ignore", NumbaPerformanceWarning)
from benchmarks.timing import captured_time
from microgpt.cuda_backend import CudaBackend
from microgpt.data import default_cache_dir
from microgpt.kernels import cache as kernel_cache

kernel_cache.use(default_cache_dir() / "kernels")
ops = CudaBackend()
rng = np.random.default_rng(0)
logits = cuda.to_device((rng.standard_normal((1, 50304)).astype(np.float32).view(np.uint32)
                         >> 16).astype(np.uint16))
start = np.array([[5, 0, 10**6, 0]], np.int32)
seq = cuda.to_device(start)
for label, kw in (("greedy", dict(temperature=0.0, top_k=0, top_p=1.0)),
                  ("T 0.8 top-k 40", dict(temperature=0.8, top_k=40, top_p=1.0)),
                  ("T 0.8 top-p 0.9", dict(temperature=0.8, top_k=0, top_p=0.9)),
                  ("T 0.8 top-k 40 top-p 0.9", dict(temperature=0.8, top_k=40, top_p=0.9))):
    seq.copy_to_device(start)       # position 0: 20 x 21 draws stay inside the cache
    us = 1e3 * captured_time(lambda stream: ops.sample_tokens(seq, logits, 10**6, vocab=None,
                                                              seed=0, stop_id=-1, **kw), 20, ops)
    print(f"{us:8.2f} us  sample_tokens {label}", flush=True)
