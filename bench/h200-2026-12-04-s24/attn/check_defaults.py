"""Session 24 (attn; from session 23's):
the routed wgmma forward (hopper.default_tile(D, T)) against float64
with the property test's check (tests/test_kernels_attention_hopper's check_forward, both
head layouts) at ragged shapes on each side of LONG_T, and past it (T 6001, where only
T 4099 had run), at D 64 and 128; the wgmma backward likewise with its property test's
check at a long and a short T (D 64: first ragged over several heads).

python3 check_defaults.py [backward] [quick] [long] [64|128] [tile=FIELDS] [dq=F] [dkdv=F]
(backward: the backward's shapes; quick: the first shape a width, unfused; long: T >= 4096;
tile: a forward HopperTile's fields, e.g. tile=2,64,4,0,0,2,0,0, instead of the default;
dq, dkdv: a backward pass's BackwardTile fields, e.g. dkdv=1,64,4,2,0 or, a producer
warpgroup donating its registers, dkdv=2,64,8,1,1,1)"""
import os
import sys
import traceback

sys.path.insert(0, "tests")
from test_kernels_attention_hopper import check_forward  # noqa: E402
from test_kernels_attention_hopper_backward import check_backward  # noqa: E402

from microgpt.kernels import cache  # noqa: E402
from microgpt.kernels.attention.hopper import HopperTile  # noqa: E402
from microgpt.kernels.attention.hopper_backward import BackwardTile  # noqa: E402

SHAPES = [(2, 3, 1000, 64), (1, 2, 4096, 64), (1, 1, 6001, 64), (1, 2, 1, 64), (3, 2, 265, 64),
          (2, 3, 777, 128), (1, 1, 4100, 128)]
BACKWARD_SHAPES = [(2, 3, 265, 64), (1, 1, 4100, 64), (1, 2, 2053, 128)]
if os.environ.get("MICROGPT_TEST_KERNEL_CACHE"):
    cache.use(os.environ["MICROGPT_TEST_KERNEL_CACHE"])
quick = "quick" in sys.argv[1:]
backward, long = "backward" in sys.argv[1:], "long" in sys.argv[1:]
fields = [[int(x) for x in a[5:].split(",")] for a in sys.argv[1:] if a.startswith("tile=")]
tile = (HopperTile(*fields[0][:3], *map(bool, fields[0][3:5]), fields[0][5],
                   *map(bool, fields[0][6:])) if fields else None)
passes = {a.split("=")[0]: [int(x) for x in a.split("=")[1].split(",")]
          for a in sys.argv[1:] if a.startswith(("dq=", "dkdv="))}
tiles = tuple(BackwardTile(*f[:4], *map(bool, f[4:])) if (f := passes.get(kind)) else None
              for kind in ("dq", "dkdv"))
widths = [int(a) for a in sys.argv[1:] if a.isdigit()] or [64, 128]
shapes = [x for D in widths for x in [x for x in (BACKWARD_SHAPES if backward else SHAPES)
                                      if x[3] == D and (x[2] >= 4096 or not long)][
                                          :1 if quick else None]]
label = (tiles if any(tiles) else "default") if backward else tuple(tile) if tile else "default"
failed = 0
for shape in shapes:
    for fused in (False,) if quick else (False, True):
        what = (f"{'backward' if backward else 'forward'} {shape} "
                f"{label} fused={fused}")
        try:
            if backward:
                check_backward(shape, tiles, 7, fused)
            else:
                check_forward(shape, tile, 7, fused)
            print(f"PASS {what}", flush=True)
        except Exception as error:
            failed += 1
            frames = [f"{f.name}:{f.lineno}" for f in traceback.extract_tb(error.__traceback__)]
            print(f"FAIL {what}: {type(error).__name__}: "
                  f"{str(error).splitlines()[0][:200]} at {' < '.join(frames[-4:])}", flush=True)
print(f"check_defaults: {failed} failed")
sys.exit(1 if failed else 0)
