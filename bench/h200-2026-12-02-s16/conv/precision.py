"""microgpt in bf16 against microgpt in fp32 (issue 31: bf16 within 0.3% of fp32 at 500
steps of andrea-120m geometry), through tools/converge.py's own pieces: each precision and
seed a microgpt trainer in a process of its own (converge.spawn), all of them at once (the
losses do not depend on the timing; their wall times here do, and are not the point), each
final model scored by converge's float32 evaluator on the whole validation split as soon
as its trainer has exited.

    python3 precision.py SEEDS PRECISIONS -- CONVERGE-ARGS
    python3 precision.py 0 bf16,fp32 -- --config andrea-120m --vocab-size 4096 --data D \\
        --tokenizer D/tokenizer.json --steps 500 --batch-size 16 --lr 6e-4 --warmup 50 \\
        --eval-every 250 --curve-windows 32 --log-every 50
"""
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tools"))
import converge  # noqa: E402
import converge_report  # noqa: E402

seeds = [int(s) for s in sys.argv[1].split(",")]
precisions = sys.argv[2].split(",")
argv = sys.argv[sys.argv.index("--") + 1:] + ["--out", "unused"]
run = converge.Run(converge.parse_args(argv))
evaluator = converge.Evaluator(run)
jobs = [(p, s) for s in seeds for p in precisions]
with tempfile.TemporaryDirectory(prefix="precision-") as top:
    works = {job: Path(top) / f"{job[0]}-{job[1]}" for job in jobs}
    for work in works.values():
        work.mkdir()
    records = {}
    with ThreadPoolExecutor(len(jobs)) as pool:
        futures = {pool.submit(converge.spawn, "microgpt", job[1],
                               argv + ["--precision", job[0]], works[job]): job for job in jobs}
        for future in as_completed(futures):    # scored while the others still train
            job, record = futures[future], future.result()
            record.score(evaluator, works[job])
            records[job] = record
            curve = ", ".join(f"step {n} {loss:.4f}" for n, _, loss in record.curve)
            print(f"seed {job[1]} {job[0]}: whole-split val {record.final:.4f}; curve {curve}; "
                  f"train {record.losses[-1]:.4f}; {converge_report.step_ms(record):.1f} ms a step "
                  f"(all {len(jobs)} at once), {record.times[-1][1]:.1f} s", flush=True)
for s in seeds:
    if {"bf16", "fp32"} <= set(precisions):
        bf16, fp32 = records["bf16", s].final, records["fp32", s].final
        print(f"seed {s}: bf16 / fp32 = {bf16 / fp32:.4f} ({100 * (bf16 / fp32 - 1):+.2f}%)")
