"""Overlay the metrics of several runs in one figure.

    python -m microgpt.plot runs/a runs/b --out compare.png               # train and val loss
    python -m microgpt.plot runs/a runs/b --metric mfu --x elapsed_s --out mfu.png

Reads each run directory's metrics.jsonl (microgpt.metrics); a run is labelled with its
directory's name.
"""
import sys
from pathlib import Path

from matplotlib.figure import Figure

from microgpt.checkpoint import atomic_file
from microgpt.cli import ArgumentParser, run_cli
from microgpt.errors import UserError
from microgpt.metrics import METRICS, draw_losses, read_metrics

PROG = "microgpt.plot"
NUMBERS = ("loss", "val_loss", "lr", "grad_norm", "tokens_per_s", "mfu", "elapsed_s")


def parse_args(argv):
    p = ArgumentParser(prog=PROG, description="Overlay the metrics of training runs.")
    p.add_argument("runs", nargs="+", metavar="RUN", help="run directories (holding "
                   f"{METRICS})")
    p.add_argument("--out", required=True, metavar="PNG", help="the figure to write")
    p.add_argument("--metric", default="loss", choices=NUMBERS, help="what to plot; loss "
                   "draws the validation loss too (default: loss)")
    p.add_argument("--x", default="step", choices=("step", "elapsed_s"),
                   help="the horizontal axis (default: step)")
    return p.parse_args(argv)


def load(run):
    path = Path(run) / METRICS
    if not path.is_file():
        raise UserError(f"{run} has no {METRICS}; pass a run directory of a training run "
                        "(runs started before the metrics file existed have none)")
    try:
        records = read_metrics(path)
    except (OSError, UnicodeDecodeError) as err:
        raise UserError(f"cannot read {path} ({err}); pass another run") from None
    except ValueError as err:
        raise UserError(f"{err}; pass another run") from None
    if not records:
        raise UserError(f"{path} holds no records yet; pass a run that has logged a step")
    return records


def draw(ax, records, metric, x, color, name):
    if metric == "loss" and x == "step":
        draw_losses(ax, records, color, f"{name} ")
        return
    points = [(r[x], r[metric]) for r in records if r.get(metric) is not None and x in r]
    if points:
        ax.plot(*zip(*points), lw=0.8, color=color, label=name)


def run(argv):
    args = parse_args(argv)
    out = Path(args.out)
    if not out.parent.is_dir():
        raise UserError(f"--out {out}: {out.parent} is not a directory; pass a path in an "
                        "existing directory")
    runs = [(Path(r).resolve().name, load(r)) for r in args.runs]
    fig = Figure(figsize=(9, 5.5), tight_layout=True)
    ax = fig.add_subplot()
    for i, (name, records) in enumerate(runs):
        draw(ax, records, args.metric, args.x, f"C{i % 10}", name)
    ax.set_xlabel(args.x)
    ax.set_ylabel("loss (nats/token)" if args.metric == "loss" else args.metric)
    ax.legend()
    try:
        atomic_file(out, lambda tmp: fig.savefig(tmp, dpi=100, format="png"))
    except OSError as err:
        raise UserError(f"cannot write {out} ({err.strerror}); pass another --out") from None
    print(f"wrote {out}: {', '.join(name for name, _ in runs)}")
    return 0


def main(argv=None):
    return run_cli(PROG, run, argv)


if __name__ == "__main__":
    sys.exit(main())
