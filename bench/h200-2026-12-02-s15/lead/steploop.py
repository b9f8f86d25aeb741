"""Where converge.py's microgpt wall time goes: the loop of train_microgpt, each part timed."""
import sys, time
T0 = time.perf_counter()
import numpy as np
from microgpt import GPT, get_config
from microgpt.cli import make_backend
from microgpt.data import BatchLoader, load_tokens
from microgpt.optim import AdamW, AdamWConfig
from microgpt.step import Step
D = sys.argv[1]; vocab = int(sys.argv[2]); B = int(sys.argv[3]); cfgname = sys.argv[4]
t = {}
def mark(k, t0): t[k] = time.perf_counter() - t0; print(f"{k}: {t[k]*1e3:.1f} ms", flush=True)
a = time.perf_counter(); cfg = get_config(cfgname, vocab_size=vocab)
backend = make_backend(sys.argv[5] if len(sys.argv) > 5 else "cuda")
mark("import+backend", T0)
a = time.perf_counter(); tokens = load_tokens(D, None, vocab, "/tmp/mgcache"); mark("tokens", a)
train = tokens.train
a = time.perf_counter(); model = GPT(cfg, backend=backend, seed=0, precision="bf16" if backend.name == "cuda" else "fp32"); mark("GPT()", a)
a = time.perf_counter(); opt = AdamW(model, AdamWConfig(lr=6e-4)); mark("AdamW()", a)
a = time.perf_counter(); step = Step(model, opt, B, cfg.context); mark("Step()", a)
loader = BatchLoader(train, B, cfg.context, cfg.vocab_size, 0)
for n in range(1, 4):
    a = time.perf_counter(); step.run(*loader.next_batch()); step.metrics(); mark(f"step {n} (synced)", a)
N = int(sys.argv[6]) if len(sys.argv) > 6 else 100
hb = hr = 0.0
a = time.perf_counter()
for n in range(N):
    b0 = time.perf_counter(); batch = loader.next_batch(); b1 = time.perf_counter()
    step.run(*batch); b2 = time.perf_counter()
    hb += b1 - b0; hr += b2 - b1
    if n % 50 == 49: step.metrics()
wall = time.perf_counter() - a
print(f"{N} steps: {wall/N*1e3:.2f} ms a step; host next_batch {hb/N*1e3:.3f} ms, run() {hr/N*1e3:.3f} ms", flush=True)
