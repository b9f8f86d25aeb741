"""Where the time to the first token of a 512-token prompt goes (andrea-120m, bf16)."""
import cProfile, io, os, pstats, sys, time, warnings
sys.path.insert(0, "tools")     # run from the repository root
import numpy as np
from numba.core.errors import NumbaPerformanceWarning
warnings.simplefilter("ignore", NumbaPerformanceWarning)
from profile_step import behind_spin, group, instrumented, op_times
from microgpt import GPT, get_config
from microgpt.data import default_cache_dir
from microgpt.generate import Decoder, Sampling, generate
from microgpt.kernels import cache as kernel_cache

kernel_cache.use(default_cache_dir() / "kernels")
cfg = get_config("andrea-120m")
t0 = time.perf_counter()
model = GPT(cfg, backend="cuda", precision="bf16")
ops = model.backend
print(f"model {time.perf_counter() - t0:.1f} s", flush=True)
rng = np.random.default_rng(0)
prompt = [list(rng.integers(0, cfg.vocab_size, 512))]
dec = Decoder(model, 1)
greedy = Sampling(temperature=0.0, top_k=0)
for i in range(7):
    t0 = time.perf_counter()
    generate(model, prompt, 1, greedy, decoder=dec)
    print(f"generate #{i}: {1e3 * (time.perf_counter() - t0):.2f} ms", flush=True)

def ms(f, n=5):
    best = 1e9
    for _ in range(n):
        ops.synchronize(); t0 = time.perf_counter(); f(); ops.synchronize()
        best = min(best, time.perf_counter() - t0)
    return 1e3 * best
print(f"3 host_buffers: {ms(lambda: [ops.host_buffer((1, 4), np.int32) for _ in range(3)]):.3f} ms")
print(f"start_many (prefill, synced): {ms(lambda: dec.start_many([0], prompt, [1], [0])):.2f} ms")
t0 = time.perf_counter(); dec.start_many([0], prompt, [1], [0]); t1 = time.perf_counter(); ops.synchronize()
print(f"start_many host enqueue {1e3*(t1-t0):.2f} ms, then sync {1e3*(time.perf_counter()-t1):.2f} ms")
dec.start_many([0], prompt, [1], [0]); ops.synchronize()
print(f"one step (replay, synced): {ms(lambda: dec.step(greedy), 1):.3f} ms")
# the prefill's device time, op by op (eager: a replay calls no op)
dec.graph = False
with instrumented(ops) as marks:
    end = behind_spin(ops, marks, lambda: dec.start_many([0], prompt, [1], [0]), ops.synchronize)
    times = op_times(marks, end)
totals, counts, _ = group(times)
print(f"prefill on the device: {sum(totals.values()):.3f} ms, {sum(counts.values())} ops")
for lab, t in sorted(totals.items(), key=lambda kv: -kv[1])[:20]:
    print(f"  {t:8.3f} ms {counts[lab]:3d}x  {lab}")
dec.graph = True
pr = cProfile.Profile()
pr.enable()
for _ in range(3):
    generate(model, prompt, 1, greedy, decoder=dec)
pr.disable()
s = io.StringIO(); pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(30); print(s.getvalue())
s = io.StringIO(); pstats.Stats(pr, stream=s).sort_stats("cumulative").print_stats(40); print(s.getvalue())
