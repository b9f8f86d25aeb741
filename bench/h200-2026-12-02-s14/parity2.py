"""Issue 26 parity, two trees compiling at once and timing one after the other:
python parity2.py LABEL SIGNAL_DIR PROFILE_OUT. Builds and warms (compiles) the bf16
captured step of andrea-120m and andrea-12m, writes SIGNAL_DIR/ready-LABEL, waits for
SIGNAL_DIR/go-LABEL, times each step (best of rounds), then profiles each config with
tools/profile_step.py (its kernels already compiled in this process), appends the reports
to PROFILE_OUT and writes SIGNAL_DIR/done-LABEL."""
import os, runpy, sys, time
from pathlib import Path
import numpy as np
from microgpt import GPT, get_config
from microgpt.optim import AdamW, AdamWConfig
from microgpt.step import Step

label, signals, prof_out = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
if os.environ.get("KERNEL_CACHE"):      # the new tree: leave its kernels for converge.py
    from microgpt.kernels import cache
    cache.use(os.environ["KERNEL_CACHE"])
CONFIGS = (("andrea-120m", 16, 1024), ("andrea-12m", 64, 256))
rounds, reps = 5, 20
steps = {}
for name, B, T in CONFIGS:
    cfg = get_config(name)
    rng = np.random.default_rng(0)
    batch = tuple(rng.integers(0, cfg.vocab_size, (B, T)).astype(np.int32) for _ in range(2))
    model = GPT(cfg, backend="cuda", precision="bf16")
    step = Step(model, AdamW(model, AdamWConfig(total_steps=10**6)), B, T, graph=True)
    for _ in range(3):
        step.run(*batch)
    step.metrics()
    steps[name] = (step, batch, B * T)
(signals / f"ready-{label}").touch()
while not (signals / f"go-{label}").exists():
    time.sleep(0.2)
for name, (step, batch, tokens) in steps.items():
    got = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(reps):
            step.run(*batch)
        step.metrics()
        got.append(tokens * reps / (time.perf_counter() - t0))
    print(f"parity {label} {name} best {max(got):.0f} tok/s rounds {[round(g) for g in got]}",
          flush=True)
steps = None
for name, B, T in (CONFIGS if prof_out != "-" else ()):
    out = f"/tmp/prof-{label}-{name}.md"
    sys.argv = ["profile_step.py", "--config", name, "--batch-size", str(B), "--seq-len", str(T),
                "--precision", "bf16", "--out", out]
    try:
        runpy.run_path("tools/profile_step.py", run_name="__main__")
    except SystemExit:
        pass
    with open(prof_out, "a") as f:
        f.write(open(out).read() if os.path.exists(out) else f"{name}: no profile\n")
(signals / f"done-{label}").touch()
