"""The host's share of generate at batch 1: the captured step replayed back to back
against generate's whole call per token, at AHEAD 2, 3 and 4, and a cProfile of a call."""
import cProfile, io, pstats, sys, time, warnings
sys.path.insert(0, "tools")     # run from the repository root
import numpy as np
from numba.core.errors import NumbaPerformanceWarning
warnings.simplefilter("ignore", NumbaPerformanceWarning)
from microgpt import GPT, get_config
from microgpt import generate as gen
from microgpt.data import default_cache_dir
from microgpt.kernels import cache as kernel_cache

kernel_cache.use(default_cache_dir() / "kernels")
greedy = gen.Sampling(temperature=0.0, top_k=0)
for name in ("andrea-120m", "andrea-12m"):
    cfg = get_config(name)
    model = GPT(cfg, backend="cuda", precision="bf16")
    ops = model.backend
    rng = np.random.default_rng(0)
    prompts = [list(rng.integers(0, cfg.vocab_size, 16))]
    dec = gen.Decoder(model, 1)
    gen.generate(model, prompts, 200, greedy, decoder=dec)
    gen.generate(model, prompts, 200, greedy, decoder=dec)
    dec.start_many([0], prompts, [10**6], [0])
    ops.synchronize()
    t0 = time.perf_counter()
    for _ in range(200):
        dec.step(greedy)
    ops.synchronize()
    step_us = 1e6 * (time.perf_counter() - t0) / 200
    t0 = time.perf_counter()
    for _ in range(200):
        dec.step(greedy)
        dec.state()
    sync_us = 1e6 * (time.perf_counter() - t0) / 200
    print(f"{name}: replayed step {step_us:.1f} us, with a state read after each {sync_us:.1f} us")
    t0 = time.perf_counter(); dec.start_many([0], prompts, [1], [0]); ops.synchronize()
    print(f"  prefill of 16 (synced) {1e6 * (time.perf_counter() - t0):.1f} us")
    for ahead in (2, 3, 4):
        gen.AHEAD = ahead
        best = 1e9
        for _ in range(3):
            t0 = time.perf_counter()
            gen.generate(model, prompts, 200, greedy, decoder=dec)
            best = min(best, time.perf_counter() - t0)
        print(f"  AHEAD {ahead}: generate {1e6 * best / 200:.1f} us a token ({200 / best:,.0f} tok/s)", flush=True)
    gen.AHEAD = 2
    pr = cProfile.Profile(); pr.enable()
    gen.generate(model, prompts, 200, greedy, decoder=dec)
    pr.disable()
    s = io.StringIO(); pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(18); print(s.getvalue())
