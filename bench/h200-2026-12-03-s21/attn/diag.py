"""Session 21 (attn): the wgmma backward's failing GPU example (call A: shape (4, 4, 265,
64), tiles (FlashTile(64, 32), BackwardTile(1, 64, 4)), seed 191, fused) and its neighbours,
one factor changed at a time, each against float64 (the property test's check_backward).
Run with CUDA_LAUNCH_BLOCKING=1: an illegal instruction is then reported at the launch of
the pass that took it. One process per case (a fault ends the context); the SASS of the
dk/dv kernels it compiled is written to $SASS_DIR (on a fault too: the cubin is the
host's); without SASS_DIR the tests' kernel cache is used.

python3 diag.py CASE     (CASES below)"""
import os
import sys
import traceback

sys.path.insert(0, "tests")
from test_kernels_attention_hopper_backward import check_backward  # noqa: E402

from microgpt.kernels import cache  # noqa: E402
from microgpt.kernels.attention import hopper_backward as hb  # noqa: E402
from microgpt.kernels.attention.flash import FlashTile  # noqa: E402
from microgpt.kernels.attention.hopper_backward import BackwardTile as BT  # noqa: E402

MMA = FlashTile(64, 32)
EX = (4, 4, 265, 64)
CASES = {
    "ex": (EX, (MMA, BT(1, 64, 4)), True),
    "ex_unfused": (EX, (MMA, BT(1, 64, 4)), False),
    "ex_wgmma_dq": (EX, (None, BT(1, 64, 4)), True),
    "ex_t256": ((4, 4, 256, 64), (MMA, BT(1, 64, 4)), True),
    "ex_t1024": ((1, 2, 1024, 64), (MMA, BT(1, 64, 4)), False),
    "onehead": ((1, 1, 265, 64), (MMA, BT(1, 64, 4)), False),
    "oneblock": ((1, 1, 64, 64), (MMA, BT(1, 64, 4)), False),
    "fivesteps": ((1, 1, 320, 64), (MMA, BT(1, 64, 4)), False),
    "t70": ((1, 1, 70, 64), (MMA, BT(1, 64, 4)), False),
    "g1s8": (EX, (MMA, BT(1, 64, 8)), True),
    "g1n32": (EX, (MMA, BT(1, 32, 4)), True),
    "g1n32b2": (EX, (MMA, BT(1, 32, 4, 2)), True),
    "g2s4": (EX, (MMA, BT(2, 64, 4)), True),
    "g2s8": (EX, (MMA, BT(2, 64, 8)), True),
    "d128g1": ((2, 2, 265, 128), (MMA, BT(1, 32, 4)), True),
    # the defaults, a second head whose statistics start off a 16-byte boundary (call C)
    "ragged2": ((1, 2, 265, 64), (None, None), False),
    # the example with its blocks' shared memory padded past half an SM's: one block an SM
    "ex_1cta": (EX, (MMA, BT(1, 64, 4)), True),
}

# the tests' carried kernels, but not where the SASS is wanted (a cached kernel's cubin
# may not be the one inspect_sass reads)
if os.environ.get("MICROGPT_TEST_KERNEL_CACHE") and not os.environ.get("SASS_DIR"):
    cache.use(os.environ["MICROGPT_TEST_KERNEL_CACHE"])
name = sys.argv[1]
shape, tiles, fused = CASES[name]
if name == "ex_1cta":
    unpadded = hb.shared_bytes
    hb.shared_bytes = lambda tile, D, kind: max(unpadded(tile, D, kind), 120 * 1024)
try:
    check_backward(shape, tiles, 191, fused)
    print(f"{name}: PASS {shape} {tiles} fused={fused}", flush=True)
except Exception as error:
    frames = [f"{f.name}:{f.lineno}" for f in traceback.extract_tb(error.__traceback__)]
    print(f"{name}: FAIL {shape} {tiles} fused={fused}: {type(error).__name__}: "
          f"{str(error).splitlines()[0][:200]} at {' < '.join(frames[-6:])}", flush=True)
if os.environ.get("SASS_DIR"):
    kernel = hb.dkdv_kernel(shape[3], tiles[1])
    for i, overload in enumerate(kernel.overloads.values()):
        try:
            sass = overload.inspect_sass()
        except Exception as error:
            sass = f"inspect_sass failed: {error}"
        with open(os.path.join(os.environ["SASS_DIR"], f"dkdv_{name}_{i}.sass"), "w") as f:
            f.write(sass)
