"""s18 decode, call A: actual generations on the GPU (random weights, bf16) through
microgpt.generate, each checked: the count and range of the tokens, the captured step's
tokens equal to the eager step's (greedy and sampled at one seed), the time of each.
Fills the kernel cache ($MICROGPT_CACHE_DIR/kernels) that bench.sh's profile_decode reads."""
import sys
import time

import numpy as np

from microgpt import GPT, get_config
from microgpt.data import default_cache_dir
from microgpt.generate import Decoder, Sampling, generate
from microgpt.kernels import cache

cache.use(default_cache_dir() / "kernels")
T0 = time.time()
TOKENS = 48
SETTINGS = {"greedy": Sampling(temperature=0.0, top_k=0),
            "sampled": Sampling(temperature=0.8, top_k=40, seed=3),
            "top-p": Sampling(temperature=1.0, top_k=0, top_p=0.9, seed=5)}
failed = []
rng = np.random.default_rng(0)
models = {}
for name, batch in (("andrea-120m", 1), ("andrea-120m", 16), ("andrea-12m", 1)):
    cfg = get_config(name)
    if name not in models:
        models[name] = GPT(cfg, backend="cuda", precision="bf16")
    model = models[name]
    prompts = [list(rng.integers(0, cfg.vocab_size, 16)) for _ in range(batch)]
    decoder = Decoder(model, batch)
    for label, sampling in SETTINGS.items():
        t = time.time()
        first = generate(model, prompts, TOKENS, sampling, decoder=decoder)   # eager, captured
        mid = time.time()
        again = generate(model, prompts, TOKENS, sampling, decoder=decoder)   # replayed
        end = time.time()
        eager = generate(model, prompts, TOKENS, sampling, graph=False)
        ok = (all(len(s) == TOKENS and all(0 <= x < cfg.vocab_size for x in s) for s in first)
              and first == again == eager)
        print(f"{'ok  ' if ok else 'FAIL'} {name} batch {batch} {label}: first call "
              f"{mid - t:.1f} s, replayed {batch * TOKENS / (end - mid):,.0f} tok/s; "
              f"tokens {first[0][:8]}; at {time.time() - T0:.0f} s", flush=True)
        if not ok:
            failed.append((name, batch, label))
prompt = [list(rng.integers(0, models["andrea-120m"].config.vocab_size, 512))]
t = time.time()
new = generate(models["andrea-120m"], prompt, 4, SETTINGS["greedy"])
print(f"512-token prompt, 4 tokens: {new[0]} in {time.time() - t:.1f} s (compile included)",
      flush=True)
print("GENERATION", "FAILED: " + str(failed) if failed else "PASSED",
      f"in {time.time() - T0:.0f} s", flush=True)
sys.exit(1 if failed else 0)
