"""Session 22 (attn): the wgmma forward's tiles at the issue's shapes, graph-replayed (the
fastest of --reps replays of 20 launches), each first compared with the mma.sync forward
(out's relative error, lse's largest difference), beside SDPA's cuDNN and flash forwards
in the same process (torch graph-replayed). ms and TFLOP/s (causal: 2 B H T^2 D).

python3 time_fwd.py [--shapes 120m 4096 d128] [--reps N] [--warm [PART PARTS]] [--set B]
--warm: compile and check each tile (every PARTS-th from PART on) at (1, 2, 1024, D)."""
import argparse
import os
import sys
import time

sys.path.insert(0, "tools")
import ml_dtypes  # noqa: E402
import numpy as np  # noqa: E402
from numba import cuda  # noqa: E402

from benchmarks.attention import bf16_host, graph_time  # noqa: E402
from benchmarks.timing import torch_captured_time  # noqa: E402
from microgpt.kernels import cache  # noqa: E402
from microgpt.kernels.attention import flash as fa, hopper  # noqa: E402
from microgpt.kernels.attention.hopper import HopperTile as HT  # noqa: E402

SHAPES = {"120m": (16, 12, 1024, 64), "4096": (4, 12, 4096, 64), "d128": (8, 16, 2048, 128)}
DONATING = {64: [HT(2, 128, 3, True, True, donate=True), HT(2, 128, 4, True, True, donate=True),
                 HT(3, 128, 3, True, donate=True), HT(3, 128, 3, True, True, donate=True),
                 HT(3, 64, 4, True, donate=True), HT(3, 64, 4, True, True, donate=True)],
            128: [HT(2, 128, 3, True, True, donate=True), HT(3, 64, 4, True, donate=True),
                  HT(3, 64, 4, True, True, donate=True)]}
# call A: the defaults, the tiles with a producer warpgroup donating its registers, and
# one tile each without (a producer warp; ping-pong in steps of 64); call B: the defaults,
# the donating tiles with ping-pong, and without it, two blocks an SM without ping-pong
# (and the lazy max, a tile option since removed: no gain); call C: the defaults, by T
SETS = {"A": {64: [None] + DONATING[64] + [HT(2, 128, 4, True, True)],
              128: [None] + DONATING[128] + [HT(2, 64, 4, False, True)]},
        "B": {64: [None] + [DONATING[64][i] for i in (0, 3, 5)]
                  + [HT(2, 128, 3, True, donate=True), HT(2, 64, 4, min_blocks=2)],
              128: [None] + [DONATING[128][i] for i in (0, 2)]
                   + [HT(2, 128, 3, True, donate=True)]},
        "C": {64: [None], 128: [None]}}
# what check_fwd.py checks: the donating tiles
NEW = DONATING


def sdpa(host, reps):
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    q, k, v = (torch.from_numpy(x).cuda().bfloat16() for x in host)
    rows = {}
    for name, backend in (("cudnn", SDPBackend.CUDNN_ATTENTION),
                          ("flash", SDPBackend.FLASH_ATTENTION)):
        with sdpa_kernel(backend):
            rows[name] = torch_captured_time(
                lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True), reps)
    return rows


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--shapes", nargs="+", default=list(SHAPES))
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--warm", nargs="*", type=int)
    parser.add_argument("--warm-t", type=int, default=1024)
    parser.add_argument("--set", default="B")
    parser.add_argument("--no-sdpa", action="store_true")
    args = parser.parse_args()
    if os.environ.get("MICROGPT_TEST_KERNEL_CACHE"):
        cache.use(os.environ["MICROGPT_TEST_KERNEL_CACHE"])
    warm = args.warm is not None
    for name in args.shapes:
        shape = (1, 2, args.warm_t, SHAPES[name][3]) if warm else SHAPES[name]
        B, H, T, D = shape
        flops = 2 * B * H * T * T * D
        rng = np.random.default_rng(0)
        host = [rng.standard_normal(shape, np.float32) for _ in range(3)]
        q, k, v = (cuda.to_device(x.astype(ml_dtypes.bfloat16).view(np.uint16)) for x in host)
        out, lse = cuda.device_array(shape, np.uint16), cuda.device_array(shape[:3], np.float32)
        fa.flash_attention_forward(out, lse, q, k, v)
        want, want_lse = bf16_host(out), lse.copy_to_host()
        print(f"{name} {shape}  mma.sync "
              f"{graph_time(lambda s: fa.flash_attention_forward(out, lse, q, k, v, stream=s), args.reps):.4f} ms"
              if not warm else f"warm {name}", flush=True)
        # (call B's "main's kernel" row ran a copy of main's forward at 784a158, since
        # removed: git show 784a158:kernels/attention/hopper.py)
        tiles = SETS[args.set][D]
        for tile in tiles[args.warm[0]::args.warm[1]] if warm and args.warm else tiles:
            t0 = time.time()
            label = ("default " + str(tuple(hopper.default_tile(D, T))) if tile is None
                     else str(tuple(tile)))

            def forward(*a, tile=tile, **kw):
                hopper.hopper_attention_forward(*a, tile=tile, **kw)
            try:
                forward(out, lse, q, k, v)
                cuda.synchronize()
                got = bf16_host(out)
                err = np.linalg.norm(got - want) / np.linalg.norm(want)
                lse_err = np.abs(lse.copy_to_host() - want_lse).max()
                if warm:
                    print(f"  {label}: rel {err:.2e} lse {lse_err:.2e} ({time.time() - t0:.1f} s)",
                          flush=True)
                    continue
                ms = graph_time(lambda s: forward(out, lse, q, k, v, stream=s), args.reps)
                print(f"  {label}: {ms:.4f} ms {flops / ms / 1e9:.0f} TFLOP/s  rel {err:.2e} "
                      f"lse {lse_err:.2e}", flush=True)
            except ValueError as error:
                print(f"  {label}: {error}", flush=True)
        if not warm and not args.no_sdpa:
            for backend, ms in sdpa(host, args.reps).items():
                print(f"  SDPA {backend}: {ms:.4f} ms {flops / ms / 1e9:.0f} TFLOP/s", flush=True)


if __name__ == "__main__":
    main()
