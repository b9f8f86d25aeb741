"""tools/converge.py's report: the table (OUT.md), every number (OUT.json) and the plot
(OUT.png) of the seeds run so far, from the trainers' records (converge.Record: losses,
times, the evaluator's curve and final loss)."""
import datetime
import importlib.metadata
import json
import math
import platform

import numpy as np

import microgpt

TRAINERS = ("microgpt", "pytorch")


def time_to(curve, target):
    """Wall seconds at which an evaluator curve [(step, s, loss)] first reaches target,
    interpolated between its points; None if it never does."""
    prev = (0, 0.0, math.inf)
    for point in curve:
        if point[2] <= target:
            if not math.isfinite(prev[2]):
                return point[1]
            f = (prev[2] - target) / (prev[2] - point[2])
            return prev[1] + f * (point[1] - prev[1])
        prev = point
    return None


def step_ms(record):
    """Milliseconds a step after the first: the median over the intervals between log
    points (a drift of the step's speed within a run shows against it in OUT.json)."""
    (n0, t0), *rest = record.times
    rates = []
    for n, t in rest:
        rates.append((t - t0) / (n - n0))
        n0, t0 = n, t
    return 1e3 * float(np.median(rates)) if rates else math.nan


def summary(records):
    """Per trainer: finals, walls, start-ups, step times and the time to PyTorch's final
    curve loss, per seed."""
    by = {t: [r for r in records if r.trainer == t] for t in TRAINERS}
    out = {}
    for trainer, rs in by.items():
        reach = []
        for r in rs:
            target = next(p for p in by["pytorch"] if p.seed == r.seed).curve[-1][2]
            reach.append(time_to(r.curve, target))
        out[trainer] = dict(final=[r.final for r in rs], wall=[r.times[-1][1] for r in rs],
                            first=[r.times[0][1] for r in rs], ms=[step_ms(r) for r in rs],
                            reach=reach, seeds=[r.seed for r in rs])
    return out


def mean_spread(values):
    v = np.asarray(values, np.float64)
    return v.mean(), (v.std(ddof=1) if len(v) > 1 else 0.0)


def report(run, records, extra, command, out):
    """OUT.md, OUT.json and OUT.png of the seeds run so far (each rewritten whole)."""
    s = summary(records)
    mg, pt = s["microgpt"], s["pytorch"]
    mg_mean, pt_mean = np.mean(mg["final"]), np.mean(pt["final"])
    c = run.config
    lines = [
        f"# Convergence: microgpt against PyTorch ({datetime.date.today().isoformat()})", "",
        f"Machine: {versions(run.device)}; {platform.node()}", "",
        f"Command: `{command}`", "",
        f"Model: n_layer {c.n_layer}, d_model {c.d_model}, n_head {c.n_head}, context "
        f"{c.context}, vocab {c.vocab_size}. Data: {run.source}. {run.steps} steps of "
        f"{run.B} x {c.context} tokens, lr {run.adamw.lr:g} (warmup {run.adamw.warmup_steps}, "
        f"cosine to {run.adamw.min_lr_ratio:g}x), seeds {', '.join(map(str, mg['seeds']))}. "
        f"microgpt in {run.precision}"
        + (" (--deterministic)" if run.deterministic else "") + "; PyTorch "
        + ("in bf16 autocast" if run.precision == "bf16" else "in float32 (TF32 off)")
        + (" under torch.compile" if run.torch_compile else "") + ".", "",
        f"Final loss: the float32 evaluator on the whole validation split ({extra['windows']} "
        f"windows of {c.context}). Each trainer and seed ran in a process of its own; its "
        "times run from the command that started it (the interpreter, the imports, the "
        "model's construction, the kernels compiled or loaded from the cache, torch.compile) "
        "to the end of step 1 (start-up) and of its last step (wall); the snapshots written "
        "for the evaluator not counted. ms a step: the median between log points after step "
        "1. To PyTorch's loss: when microgpt's evaluator curve first reached the final curve "
        "loss of PyTorch's run of the same seed.", "",
        "| seed | microgpt val | PyTorch val | microgpt / PyTorch | microgpt start-up s | "
        "microgpt ms a step | microgpt wall s | PyTorch start-up s | PyTorch ms a step | "
        "PyTorch wall s | microgpt to PyTorch's loss, s | that / PyTorch wall |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for i, seed in enumerate(mg["seeds"]):
        reach = mg["reach"][i]
        reach_text = (f"{reach:.1f} | {reach / pt['wall'][i]:.2f}" if reach is not None
                      else "not reached | ")
        lines.append(f"| {seed} | {mg['final'][i]:.4f} | {pt['final'][i]:.4f} | "
                     f"{mg['final'][i] / pt['final'][i]:.4f} | {mg['first'][i]:.1f} | "
                     f"{mg['ms'][i]:.2f} | {mg['wall'][i]:.1f} | {pt['first'][i]:.1f} | "
                     f"{pt['ms'][i]:.2f} | {pt['wall'][i]:.1f} | {reach_text} |")
    (mm, ms), (pm, ps) = mean_spread(mg["final"]), mean_spread(pt["final"])
    lines += ["", f"Mean over seeds: microgpt {mm:.4f} ± {ms:.4f}, PyTorch {pm:.4f} ± {ps:.4f} "
              f"(sample standard deviation): microgpt {100 * (mg_mean / pt_mean - 1):+.2f}%. "
              "Wall to the last step, microgpt / PyTorch, summed over the seeds: "
              f"{np.sum(mg['wall']) / np.sum(pt['wall']):.2f}.", ""]
    diffs = agreement(records)
    if diffs:
        lines += ["The training losses on the same batches, |microgpt - PyTorch| / PyTorch, the "
                  "largest over seeds: " + ", ".join(f"step {k} {v:.2e}" for k, v in diffs) + ".",
                  ""]
    out.with_suffix(".md").write_text("\n".join(lines))
    out.with_suffix(".json").write_text(json.dumps(dict(
        command=command, config=c.__dict__, steps=run.steps, batch_size=run.B,
        precision=run.precision, deterministic=run.deterministic,
        torch_compile=run.torch_compile, **extra,
        records=[r.as_dict() for r in records]), indent=1))
    plot(records, out.with_suffix(".png"), f"n_layer {c.n_layer}, d_model {c.d_model}, "
         f"{run.steps} steps of {run.B} x {c.context}, {len(mg['seeds'])} seeds")
    print("\n".join(lines))
    print(f"wrote {out.with_suffix('.md')}, .png, .json")


def agreement(records):
    """[(step, largest relative difference of the two trainers' training loss)] at a few
    steps: how long the trajectories stay together before rounding makes them drift."""
    out = []
    steps = len(records[0].losses)
    for k in sorted({1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, steps} & set(range(1, steps + 1))):
        worst = 0.0
        for seed in {r.seed for r in records}:
            mg, pt = (next(r for r in records if r.seed == seed and r.trainer == t)
                      for t in ("microgpt", "pytorch"))
            worst = max(worst, abs(mg.losses[k - 1] - pt.losses[k - 1]) / pt.losses[k - 1])
        out.append((k, worst))
    return out


def smooth(x, width):
    x = np.asarray(x, np.float64)
    if width <= 1 or len(x) < width:
        return x
    kernel = np.ones(width) / width
    return np.concatenate([np.cumsum(x[:width - 1]) / np.arange(1, width),
                           np.convolve(x, kernel, mode="valid")])


def plot(records, path, title):
    from matplotlib.figure import Figure

    fig = Figure(figsize=(13, 4.2))
    axes = fig.subplots(1, 3)
    styles = {"microgpt": ("tab:blue", "-"), "pytorch": ("tab:orange", "--")}
    for trainer, (color, style) in styles.items():
        rs = [r for r in records if r.trainer == trainer]
        width = max(1, len(rs[0].losses) // 50)
        curves = np.array([smooth(r.losses, width) for r in rs])
        steps = np.arange(1, curves.shape[1] + 1)
        # wall time at every step, interpolated between the log points
        walls = np.array([np.interp(steps, *zip(*([(0, 0.0)] + r.times))) for r in rs])
        mean, lo, hi = curves.mean(0), curves.min(0), curves.max(0)
        for ax, x in ((axes[0], steps), (axes[1], walls.mean(0))):
            ax.plot(x, mean, color=color, linestyle=style, label=f"{trainer} (mean of {len(rs)})")
            ax.fill_between(x, lo, hi, color=color, alpha=0.25, linewidth=0)
        cs = np.array([[p[2] for p in r.curve] for r in rs])
        cx = [p[0] for p in rs[0].curve]
        axes[2].errorbar(cx, cs.mean(0), yerr=[cs.mean(0) - cs.min(0), cs.max(0) - cs.mean(0)],
                         color=color, linestyle=style, marker="o", ms=3, capsize=2,
                         label=trainer)
    fig.suptitle(title)             # (as the first plot's title, a long one was cut off)
    axes[0].set(xlabel="step", ylabel="training loss (smoothed), nats/token",
                title="against steps")
    axes[1].set(xlabel="wall seconds (start-up included)", ylabel="training loss (smoothed)",
                title="against wall time")
    axes[2].set(xlabel="step", ylabel="validation loss (float32 evaluator)",
                title="the evaluator's curve (range over seeds)")
    for ax in axes:
        ax.legend()
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def versions(device):
    import numba

    text = (f"python {platform.python_version()}, numpy {np.__version__}, numba "
            f"{numba.__version__}, torch {importlib.metadata.version('torch')}, microgpt "
            f"{microgpt.__version__}")
    if device != "cuda":
        return f"CPU {platform.machine()}; {text}"
    from numba import cuda
    name = cuda.get_current_device().name
    return f"GPU {name.decode() if isinstance(name, bytes) else name}; {text}"
