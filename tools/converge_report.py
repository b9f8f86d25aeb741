"""tools/converge.py's report: the table (OUT.md), every number (OUT.json) and the plot
(OUT.png) of the seeds run so far, from the trainers' records (converge.Record: losses,
times, the evaluator's curve and final loss). Rebuilt from a run's OUT.json alone:

    python tools/converge_report.py OUT.json --out NEW     # writes NEW.md, NEW.png
"""
import argparse
import datetime
import importlib.metadata
import json
import math
import platform
import sys
from pathlib import Path

import numpy as np

import microgpt

TRAINERS = ("microgpt", "pytorch")


def reach(curve, target):
    """(step, wall s) at which an evaluator curve [(step, s, loss)] first reaches target,
    interpolated between its points; None if it never does."""
    prev = (0, 0.0, math.inf)
    for point in curve:
        if point[2] <= target:
            if not math.isfinite(prev[2]):
                return point[0], point[1]
            f = (prev[2] - target) / (prev[2] - point[2])
            return prev[0] + f * (point[0] - prev[0]), prev[1] + f * (point[1] - prev[1])
        prev = point
    return None


def time_to(curve, target):
    """Wall seconds at which curve first reaches target (reach), or None."""
    reached = reach(curve, target)
    return reached and reached[1]


def step_ms(record):
    """Milliseconds a step after the first: the median over the intervals between log
    points (a drift of the step's speed within a run shows against it in OUT.json)."""
    (n0, t0), *rest = record.times
    rates = []
    for n, t in rest:
        rates.append((t - t0) / (n - n0))
        n0, t0 = n, t
    return 1e3 * float(np.median(rates)) if rates else math.nan


def pairs(records):
    """{seed: {trainer: record}} of the seeds both trainers finished (a run cut short may
    hold one trainer's record of its last seed), and the unpaired records."""
    by_seed = {}
    for r in records:
        by_seed.setdefault(r.seed, {})[r.trainer] = r
    paired = {s: d for s, d in by_seed.items() if set(d) == set(TRAINERS)}
    return paired, [r for s, d in by_seed.items() if s not in paired for r in d.values()]


def summary(paired):
    """Per trainer, over the paired seeds: finals, walls, start-ups, step times and the
    time to PyTorch's final curve loss of the same seed."""
    out = {}
    for trainer in TRAINERS:
        rs = [d[trainer] for d in paired.values()]
        out[trainer] = dict(
            final=[r.final for r in rs], wall=[r.times[-1][1] for r in rs],
            first=[r.times[0][1] for r in rs], ms=[step_ms(r) for r in rs],
            reach=[time_to(d[trainer].curve, d["pytorch"].curve[-1][2])
                   for d in paired.values()],
            seeds=list(paired))
    return out


def mean_curve(records):
    """[(step, mean wall s, mean loss)]: the evaluator's curves averaged over records
    (their points at the same steps), loss and wall time alike."""
    steps = [p[0] for p in records[0].curve]
    if any([p[0] for p in r.curve] != steps for r in records):
        raise ValueError("the seeds' evaluator curves have points at different steps; "
                         "report runs of one command (one --eval-every and --steps)")
    walls, losses = (np.mean([[p[i] for p in r.curve] for r in records], 0) for i in (1, 2))
    return [(s, float(w), float(v)) for s, w, v in zip(steps, walls, losses)]


def mean_criterion(paired):
    """The wall-time target read on the mean curves over seeds: when microgpt's mean curve
    reaches PyTorch's mean final curve loss, against PyTorch's mean wall to its last step;
    and the other way, when PyTorch's mean curve reached microgpt's mean final one."""
    mg, pt = (mean_curve([d[t] for d in paired.values()]) for t in TRAINERS)
    walls = {t: float(np.mean([d[t].times[-1][1] for d in paired.values()]))
             for t in TRAINERS}
    return dict(microgpt_curve=mg, pytorch_curve=pt, target=pt[-1][2],
                microgpt_final_curve=mg[-1][2], walls=walls,
                microgpt_reach=reach(mg, pt[-1][2]), pytorch_reach=reach(pt, mg[-1][2]))


def mean_spread(values):
    v = np.asarray(values, np.float64)
    return v.mean(), (v.std(ddof=1) if len(v) > 1 else 0.0)


def run_facts(run, extra, command):
    """What the report says of a run beside its records (OUT.json keeps it, so that the
    report can be rebuilt from OUT.json alone)."""
    return dict(command=command, date=datetime.date.today().isoformat(),
                machine=f"{versions(run.device)}; {platform.node()}",
                config=dict(run.config.__dict__), source=run.source, steps=run.steps,
                batch_size=run.B, lr=run.adamw.lr, warmup=run.adamw.warmup_steps,
                min_lr_ratio=run.adamw.min_lr_ratio, precision=run.precision,
                deterministic=run.deterministic, torch_compile=run.torch_compile, **extra)


def report(run, records, extra, command, out):
    """OUT.md, OUT.json and OUT.png of the seeds run so far (each rewritten whole)."""
    write(run_facts(run, extra, command), records, out)
    print(out.with_suffix(".md").read_text())
    print(f"wrote {out.with_suffix('.md')}, .png, .json")


def write(facts, records, out, numbers=True):
    """OUT.md, OUT.png and (numbers) OUT.json of facts (run_facts) and the records."""
    out.with_suffix(".md").write_text("\n".join(table(facts, records)))
    if numbers:
        out.with_suffix(".json").write_text(json.dumps(dict(
            **facts, records=[r.as_dict() for r in records]), indent=1))
    paired, _ = pairs(records)
    c = facts["config"]
    plot(paired, out.with_suffix(".png"), f"n_layer {c['n_layer']}, d_model {c['d_model']}, "
         f"{facts['steps']} steps of {facts['batch_size']} x {c['context']}, "
         f"{len(paired)} seed{'s' * (len(paired) > 1)}")


def table(facts, records):
    """OUT.md's lines."""
    paired, unpaired = pairs(records)
    if not paired:
        raise ValueError("no seed has both trainers' records: nothing to compare")
    s = summary(paired)
    mg, pt = s["microgpt"], s["pytorch"]
    c = facts["config"]
    lines = [
        f"# Convergence: microgpt against PyTorch ({facts['date']})", "",
        f"Machine: {facts['machine']}", "",
        f"Command: `{facts['command']}`", "",
        f"Model: n_layer {c['n_layer']}, d_model {c['d_model']}, n_head {c['n_head']}, "
        f"context {c['context']}, vocab {c['vocab_size']}. Data: {facts['source']}. "
        f"{facts['steps']} steps of {facts['batch_size']} x {c['context']} tokens, lr "
        f"{facts['lr']:g} (warmup {facts['warmup']}, cosine to {facts['min_lr_ratio']:g}x), "
        f"seeds {', '.join(map(str, mg['seeds']))}. microgpt in {facts['precision']}"
        + (" (--deterministic)" if facts["deterministic"] else "") + "; PyTorch "
        + ("in bf16 autocast" if facts["precision"] == "bf16" else "in float32 (TF32 off)")
        + (" under torch.compile" if facts["torch_compile"] else "") + ".", "",
        f"Final loss: the float32 evaluator on the whole validation split ({facts['windows']} "
        f"windows of {c['context']}). Each trainer and seed ran in a process of its own; its "
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
        to = mg["reach"][i]
        to_text = (f"{to:.1f} | {to / pt['wall'][i]:.2f}" if to is not None
                   else "not reached | ")
        lines.append(f"| {seed} | {mg['final'][i]:.4f} | {pt['final'][i]:.4f} | "
                     f"{mg['final'][i] / pt['final'][i]:.4f} | {mg['first'][i]:.1f} | "
                     f"{mg['ms'][i]:.2f} | {mg['wall'][i]:.1f} | {pt['first'][i]:.1f} | "
                     f"{pt['ms'][i]:.2f} | {pt['wall'][i]:.1f} | {to_text} |")
    (mm, ms), (pm, ps) = mean_spread(mg["final"]), mean_spread(pt["final"])
    lines += ["", f"Mean over seeds: microgpt {mm:.4f} ± {ms:.4f}, PyTorch {pm:.4f} ± {ps:.4f} "
              f"(sample standard deviation): microgpt {100 * (mm / pm - 1):+.2f}%. "
              "Wall to the last step, microgpt / PyTorch, summed over the seeds: "
              f"{np.sum(mg['wall']) / np.sum(pt['wall']):.2f}.", ""]
    lines += [criterion_text(mean_criterion(paired), len(paired)), ""]
    for r in unpaired:
        lines += [f"Seed {r.seed}: {r.trainer}'s run alone (the other trainer's missing: "
                  f"the run was cut short), whole-split val {r.final:.4f}, start-up "
                  f"{r.times[0][1]:.1f} s, {step_ms(r):.2f} ms a step, wall "
                  f"{r.times[-1][1]:.1f} s; not in the table nor the means.", ""]
    diffs = agreement(list(paired.values()))
    if diffs:
        lines += ["The training losses on the same batches, |microgpt - PyTorch| / PyTorch, the "
                  "largest over seeds: " + ", ".join(f"step {k} {v:.2e}" for k, v in diffs) + ".",
                  ""]
    return lines


def criterion_text(m, seeds):
    """The mean-curve criterion in a paragraph."""
    pt_wall, mg_wall = m["walls"]["pytorch"], m["walls"]["microgpt"]
    text = (f"On the mean curves over {seeds} seed{'s' * (seeds > 1)} (the evaluator's "
            "curve points and their wall times averaged step by step): PyTorch's ends at "
            f"{m['target']:.4f} "
            f"(its mean wall to the last step {pt_wall:.1f} s), microgpt's at "
            f"{m['microgpt_final_curve']:.4f} "
            f"({100 * (m['microgpt_final_curve'] / m['target'] - 1):+.2f}%; its mean wall "
            f"{mg_wall:.1f} s, {mg_wall / pt_wall:.2f}x). ")
    if m["microgpt_reach"] is not None:
        step, s = m["microgpt_reach"]
        text += (f"**microgpt's mean curve reaches PyTorch's mean final curve loss at "
                 f"{s:.1f} s (step {step:.0f}), {s / pt_wall:.2f}x PyTorch's mean wall.**")
    else:
        text += "**microgpt's mean curve does not reach PyTorch's mean final curve loss.**"
    if m["pytorch_reach"] is not None:
        step, s = m["pytorch_reach"]
        text += (f" The other way: PyTorch's mean curve reached microgpt's mean final curve "
                 f"loss at {s:.1f} s (step {step:.0f}); microgpt got there in "
                 f"{mg_wall / s:.2f}x that.")
    return text


def agreement(pairs):
    """[(step, largest relative difference of the two trainers' training loss)] at a few
    steps, over pairs ({trainer: record} of a seed each): how long the trajectories stay
    together before rounding makes them drift."""
    out = []
    steps = len(pairs[0]["microgpt"].losses)
    for k in sorted({1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, steps} & set(range(1, steps + 1))):
        worst = max(abs(d["microgpt"].losses[k - 1] - d["pytorch"].losses[k - 1])
                    / d["pytorch"].losses[k - 1] for d in pairs)
        out.append((k, worst))
    return out


def smooth(x, width):
    x = np.asarray(x, np.float64)
    if width <= 1 or len(x) < width:
        return x
    kernel = np.ones(width) / width
    return np.concatenate([np.cumsum(x[:width - 1]) / np.arange(1, width),
                           np.convolve(x, kernel, mode="valid")])


def plot(paired, path, title):
    """Training loss against steps and wall time (mean and range over the paired seeds),
    the evaluator's curve against steps, and its mean curve against wall time with
    PyTorch's mean final curve loss and mean wall (the wall-time target's reading)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(17, 4.2))
    axes = fig.subplots(1, 4)
    styles = {"microgpt": ("tab:blue", "-"), "pytorch": ("tab:orange", "--")}
    m = mean_criterion(paired)
    for trainer, (color, style) in styles.items():
        rs = [d[trainer] for d in paired.values()]
        width = max(1, len(rs[0].losses) // 50)
        curves = np.array([smooth(r.losses, width) for r in rs])
        steps = np.arange(1, curves.shape[1] + 1)
        # wall time at every step, interpolated between the log points
        walls = np.array([np.interp(steps, *zip(*([(0, 0.0)] + list(r.times)))) for r in rs])
        mean, lo, hi = curves.mean(0), curves.min(0), curves.max(0)
        for ax, x in ((axes[0], steps), (axes[1], walls.mean(0))):
            ax.plot(x, mean, color=color, linestyle=style, label=f"{trainer} (mean of {len(rs)})")
            ax.fill_between(x, lo, hi, color=color, alpha=0.25, linewidth=0)
        cs = np.array([[p[2] for p in r.curve] for r in rs])
        cx = [p[0] for p in rs[0].curve]
        axes[2].errorbar(cx, cs.mean(0), yerr=[cs.mean(0) - cs.min(0), cs.max(0) - cs.mean(0)],
                         color=color, linestyle=style, marker="o", ms=3, capsize=2,
                         label=trainer)
        _, cw, cl = zip(*m[f"{trainer}_curve"])
        axes[3].plot(cw, cl, color=color, linestyle=style, marker="o", ms=3,
                     label=f"{trainer} (mean of {len(rs)})")
    axes[3].axhline(m["target"], color="gray", linewidth=0.8,
                    label=f"PyTorch's mean final {m['target']:.4f}")
    axes[3].axvline(m["walls"]["pytorch"], color="tab:orange", linewidth=0.8, linestyle=":",
                    label=f"PyTorch's mean wall {m['walls']['pytorch']:.1f} s")
    axes[3].axvline(0.7 * m["walls"]["pytorch"], color="gray", linewidth=0.8, linestyle=":",
                    label="0.7x that (the target)")
    # the end of the run, where the target is read, rather than the first points' losses
    tail = [p[2] for t in TRAINERS for p in m[f"{t}_curve"][len(m[f"{t}_curve"]) // 2:]]
    axes[3].set_ylim(min(tail) - 0.02, max(tail) + 0.02)
    fig.suptitle(title)             # (as the first plot's title, a long one was cut off)
    axes[0].set(xlabel="step", ylabel="training loss (smoothed), nats/token",
                title="against steps")
    axes[1].set(xlabel="wall seconds (start-up included)", ylabel="training loss (smoothed)",
                title="against wall time")
    axes[2].set(xlabel="step", ylabel="validation loss (float32 evaluator)",
                title="the evaluator's curve (range over seeds)")
    axes[3].set(xlabel="mean wall seconds (start-up included)",
                ylabel="validation loss, mean over seeds",
                title="the mean curves against wall time")
    for ax in axes:
        ax.legend(fontsize=8)
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


# ----------------------------------------------------------------------------------
# rebuilt from OUT.json

def facts_of(numbers, json_path):
    """run_facts from an OUT.json. One written before session 23 kept fewer: the
    schedule is read back from its command (converge.py's arguments), the data from its
    --data, the machine and date from the OUT.md beside it if there is one."""
    facts = {k: v for k, v in numbers.items() if k != "records"}
    if "machine" in facts:
        return facts
    from converge import parse_args          # (beside this file, on its path)
    from microgpt.optim import AdamWConfig

    args = parse_args(facts["command"].split()[2:])
    md = Path(json_path).with_suffix(".md")
    head = md.read_text().splitlines() if md.is_file() else []
    machine = next((line[len("Machine: "):] for line in head if line.startswith("Machine: ")),
                   "not recorded (an OUT.json of before session 23, no OUT.md beside it)")
    date = head[0].rsplit("(", 1)[-1].rstrip(")") if head else "date not recorded"
    return dict(facts, machine=machine, date=date, source=f"--data {args.data}", lr=args.lr,
                warmup=args.warmup if args.warmup is not None else max(1, args.steps // 20),
                min_lr_ratio=AdamWConfig.min_lr_ratio)


def rebuild(json_path, out):
    """OUT.md and OUT.png rebuilt from a run's OUT.json."""
    from converge import Record              # (beside this file, on its path)

    numbers = json.loads(Path(json_path).read_text())
    records = []
    for d in numbers["records"]:
        record = Record(d["trainer"], d["seed"])
        record.losses, record.final = d["losses"], d["final"]
        record.times = [tuple(t) for t in d["times"]]
        record.curve = [tuple(c) for c in d["curve"]]
        records.append(record)
    write(facts_of(numbers, json_path), records, Path(out), numbers=False)


def main(argv=None):
    p = argparse.ArgumentParser(prog="converge_report.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("json", help="a run's OUT.json (tools/converge.py --out OUT)")
    p.add_argument("--out", required=True, help="writes OUT.md and OUT.png")
    args = p.parse_args(argv)
    out = Path(args.out)
    if not Path(args.json).is_file():
        print(f"converge_report.py: {args.json}: no such file; pass the OUT.json of a "
              "tools/converge.py run", file=sys.stderr)
        return 2
    if not out.parent.is_dir():
        print(f"converge_report.py: --out {args.out}: the directory {out.parent} does not "
              "exist; create it or pass another --out", file=sys.stderr)
        return 2
    try:
        rebuild(args.json, out)
    except ValueError as err:
        print(f"converge_report.py: {args.json}: {err}", file=sys.stderr)
        return 2
    print(out.with_suffix(".md").read_text())
    print(f"wrote {out.with_suffix('.md')}, .png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
