"""tools/bench.py --only attention with the kernel cache on (bench.py compiles every run
afresh): the wgmma forward's times after copy_ahead was left for NVVM to inline, beside
SDPA in the same run and session 15's table (bench/h200-2026-12-02-s15/callC-attn/).
A first run fills the cache (test.sh, beside other work), the second is the timing.

    python bench/h200-2026-12-03-s18/start/attention_cached.py CACHE_DIR OUT.md
"""
import sys
from pathlib import Path

root = Path(__file__).resolve().parents[3]
sys.path[:0] = [str(root / "tools"), str(root)]

from microgpt.kernels import cache  # noqa: E402

import bench  # noqa: E402

cache.use(Path(sys.argv[1]) / "kernels")
sys.exit(bench.main(["--only", "attention", "--out", sys.argv[2]]))
