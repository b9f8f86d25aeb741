"""s18 decode: sample_tokens per launch, this tree's sampler (session 14's, top-k by a
32-step bisection) against the byte histograms of radix_sampling.py (copied into the
package as _radix_sampling), at andrea-120m's vocabulary in bf16 logits; the tokens of
both compared."""
import shutil
from pathlib import Path

import numpy as np
from numba import cuda

here = Path(__file__).parent
shutil.copy(here / "radix_sampling.py", "kernels/_radix_sampling.py")
from microgpt.kernels import sampling, _radix_sampling   # noqa: E402

V, REPS = 50304, 200
rng = np.random.default_rng(0)
for B in (1, 16):
    x = (rng.standard_normal((B, V)) * 3).astype(np.float32)
    logits = cuda.to_device((x.view(np.uint32) >> 16).astype(np.uint16))     # bf16 bits
    for label, kw in (("greedy", dict(temperature=0.0)),
                      ("T 0.8 top-k 40", dict(temperature=0.8, top_k=40)),
                      ("T 1 top-p 0.9", dict(temperature=1.0, top_p=0.9))):
        row, tokens = {}, {}
        for name, mod in (("bisection", sampling), ("bytes", _radix_sampling)):
            host = np.zeros((B, 4), np.int32)
            host[:, 2] = 10**6
            seq = cuda.to_device(host)
            mod.sample_tokens(seq, logits, 10**6, seed=1, **kw)     # compiles
            cuda.synchronize()
            seq = cuda.to_device(host)
            start, end = cuda.event(), cuda.event()
            start.record()
            for _ in range(REPS):
                mod.sample_tokens(seq, logits, 10**6, seed=1, **kw)
            end.record()
            end.synchronize()
            row[name] = 1e3 * cuda.event_elapsed_time(start, end) / REPS
            tokens[name] = seq.copy_to_host()
        same = np.array_equal(tokens["bisection"], tokens["bytes"])
        print(f"B {B:2d} {label:15s}: bisection {row['bisection']:7.1f} us, bytes "
              f"{row['bytes']:7.1f} us a launch; after {REPS} draws the states "
              f"{'are the same' if same else 'DIFFER'}", flush=True)
Path("kernels/_radix_sampling.py").unlink()
