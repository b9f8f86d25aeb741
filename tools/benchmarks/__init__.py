"""The sections of tools/bench.py, one module each: a bench_<section> function that measures
and returns rows, and a <section>_report that turns them into markdown. Imported with
tools/ on the path (as `python tools/bench.py` runs)."""
