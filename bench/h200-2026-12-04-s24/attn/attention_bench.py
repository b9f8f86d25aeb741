"""Session 24 (attn; from session 23's): tools/bench.py --only attention through the
kernel cache that the device calls carry ($MICROGPT_TEST_KERNEL_CACHE), so that a call's
bench finds the kernels its test job compiled; --rows NAME... keeps only those rows of
the table (its shapes' names, e.g. andrea-12m "head_dim 72": the bench's limit held three
of the five in call A); --warm runs the section at small shapes of the same routes (T 1027
and, at D 64, 4099 for the long-walk tile) to compile them, writing no report.

python3 attention_bench.py [--warm] [--rows NAME...] [tools/bench.py's arguments]"""
import os
import sys

sys.path.insert(0, "tools")
import bench  # noqa: E402
from benchmarks import attention  # noqa: E402

from microgpt.kernels import cache  # noqa: E402

if os.environ.get("MICROGPT_TEST_KERNEL_CACHE"):
    cache.use(os.environ["MICROGPT_TEST_KERNEL_CACHE"])
args = sys.argv[1:]
if "--rows" in args:
    at = end = args.index("--rows")
    while end + 1 < len(args) and not args[end + 1].startswith("--"):
        end += 1
    names = args[at + 1:end + 1]
    del args[at:end + 1]
    attention.ATTENTION_SHAPES = tuple(row for row in attention.ATTENTION_SHAPES
                                       if row[0] in names)
if "--warm" in args:
    args.remove("--warm")
    attention.ATTENTION_SHAPES = tuple(
        (f"warm {name}", 1, 2, 4099 if T >= 4096 else 1027, D)
        for name, B, H, T, D in attention.ATTENTION_SHAPES)
    attention.bench_flash_attention(2, "--attention-sweep" in args)
else:
    sys.exit(bench.main(["--only", "attention"] + args))
