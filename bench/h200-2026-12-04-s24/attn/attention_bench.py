"""Session 24 (attn; from session 23's):
tools/bench.py --only attention through the kernel cache that the
device calls carry ($MICROGPT_TEST_KERNEL_CACHE), so that a call's bench finds the kernels
its test job compiled; --warm runs the section at small shapes of the same routes (T 1027
and, at D 64, 4099 for the long-walk tile) to compile them, writing no report.

python3 attention_bench.py [--warm] [tools/bench.py's arguments]"""
import os
import sys

sys.path.insert(0, "tools")
import bench  # noqa: E402
from benchmarks import attention  # noqa: E402

from microgpt.kernels import cache  # noqa: E402

if os.environ.get("MICROGPT_TEST_KERNEL_CACHE"):
    cache.use(os.environ["MICROGPT_TEST_KERNEL_CACHE"])
args = sys.argv[1:]
if "--warm" in args:
    args.remove("--warm")
    attention.ATTENTION_SHAPES = tuple(
        (f"warm {name}", 1, 2, 4099 if T >= 4096 else 1027, D)
        for name, B, H, T, D in attention.ATTENTION_SHAPES)
    attention.bench_flash_attention(2, "--attention-sweep" in args)
else:
    sys.exit(bench.main(["--only", "attention"] + args))
