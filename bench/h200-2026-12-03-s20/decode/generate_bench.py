"""tools/bench.py --only generate's section (microgpt's rows, transformers not run) with the
trainer's kernel cache, its report written to argv[1]: the issue's figures. Run from the
repository root; argv[2], if given, is the new tokens per sequence (2: a warm-up)."""
import sys
import warnings

sys.path.insert(0, "tools")
from numba.core.errors import NumbaPerformanceWarning                   # noqa: E402

from benchmarks.generate import bench_generate, generate_report         # noqa: E402
from microgpt.data import default_cache_dir                             # noqa: E402
from microgpt.kernels import cache as kernel_cache                      # noqa: E402

warnings.simplefilter("ignore", NumbaPerformanceWarning)
kernel_cache.use(default_cache_dir() / "kernels")
rows = bench_generate("cuda", int(sys.argv[2]) if len(sys.argv) > 2 else 200,
                      transformers=False)
with open(sys.argv[1], "w") as f:
    f.write("\n".join([f"Command: `python {' '.join(sys.argv)}`", ""]
                      + generate_report(rows, "cuda")))
