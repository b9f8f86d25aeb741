"""Generations in a process of their own (the kernel cache of a bench's, not the tests'):
andrea-120m at batch 1 and 16 and andrea-12m at 1, greedy, top-k 40 and top-p 0.9, 24
tokens after 16-token prompts; captured and eager give the same tokens."""
import sys, warnings
import numpy as np
from numba.core.errors import NumbaPerformanceWarning
warnings.simplefilter("ignore", NumbaPerformanceWarning)
from microgpt import GPT, get_config
from microgpt.data import default_cache_dir
from microgpt.generate import Decoder, Sampling, generate
from microgpt.kernels import cache as kernel_cache

kernel_cache.use(default_cache_dir() / "kernels")
failed = 0
for name, batch in (("andrea-120m", 1), ("andrea-120m", 16), ("andrea-12m", 1)):
    cfg = get_config(name)
    model = GPT(cfg, backend="cuda", precision="bf16")
    rng = np.random.default_rng(1)
    prompts = [list(rng.integers(0, cfg.vocab_size, 16)) for _ in range(batch)]
    for sampling in (Sampling(temperature=0.0, top_k=0), Sampling(temperature=0.8, top_k=40),
                     Sampling(temperature=0.8, top_k=0, top_p=0.9)):
        decoder = Decoder(model, batch)
        runs = [generate(model, prompts, 24, sampling, decoder=decoder) for _ in range(3)]
        eager = generate(model, prompts, 24, sampling, graph=False)
        same = runs[0] == runs[1] == runs[2] == eager
        failed += not same
        print(f"{name} batch {batch:2d} {sampling.temperature} {sampling.top_k} "
              f"{sampling.top_p}: {'same' if same else 'DIFFER'} {runs[0][0][:8]}", flush=True)
sys.exit(failed)
