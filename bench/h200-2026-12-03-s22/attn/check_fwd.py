"""Session 22 (attn): the wgmma forward's new tiles (a donating producer warpgroup:
setmaxnreg, the driver's whole-program JIT), or its defaults, against float64 at ragged
shapes, each with the property test's check (tests/test_kernels_attention_hopper's
check_forward).

python3 check_fwd.py [quick] [default] [long] [64|128]
(quick: one shape a width, unfused; default: the default tiles instead; long: T >= 4096)"""
import os
import sys
import traceback

sys.path.insert(0, "tests")
from test_kernels_attention_hopper import check_forward  # noqa: E402

from microgpt.kernels import cache  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
from time_fwd import NEW as TILES  # noqa: E402
# (the D 64 default from hopper.LONG_T on: 4099)
SHAPES = [(2, 3, 1000, 64), (1, 2, 1, 64), (3, 2, 265, 64), (1, 3, 4099, 64), (2, 3, 777, 128),
          (1, 1, 70, 128)]
if os.environ.get("MICROGPT_TEST_KERNEL_CACHE"):
    cache.use(os.environ["MICROGPT_TEST_KERNEL_CACHE"])
quick, default, long = ("quick" in sys.argv[1:], "default" in sys.argv[1:],
                        "long" in sys.argv[1:])
widths = [int(a) for a in sys.argv[1:] if a.isdigit()] or [64, 128]
shapes = [x for D in widths
          for x in [x for x in SHAPES if x[3] == D and (x[2] >= 4096 or not long)][
              :1 if quick else None]]
failed = 0
for shape in shapes:
    for tile in [None] if default else TILES[shape[3]]:
        for fused in (False,) if quick else (False, True):
            try:
                check_forward(shape, tile, 7, fused)
                print(f"PASS {shape} {tile and tuple(tile)} fused={fused}", flush=True)
            except Exception as error:
                failed += 1
                frames = [f"{f.name}:{f.lineno}" for f in traceback.extract_tb(error.__traceback__)]
                print(f"FAIL {shape} {tile and tuple(tile)} fused={fused}: {type(error).__name__}: "
                      f"{str(error).splitlines()[0][:200]} at {' < '.join(frames[-4:])}",
                      flush=True)
print(f"check_fwd: {failed} failed")
sys.exit(1 if failed else 0)
