"""The wgmma dk/dv pass's tiles against flash's mma.sync backward, each checked against the
mma.sync gradients first, then timed replayed in a CUDA graph (as the step runs them).

python3 jobs_attn/time_bwd.py [--warm PART PARTS] [--reps N] [--shapes 120m 4096 d128] [--sdpa]
--warm: compile (and check) every PARTS-th variant from PART on at a small shape, no timing.
"""
import argparse
import os
import sys
import time

sys.path.insert(0, "tools")
import ml_dtypes  # noqa: E402
import numpy as np  # noqa: E402
from numba import cuda  # noqa: E402

from benchmarks.attention import graph_time, bf16_host  # noqa: E402
from microgpt.kernels.attention import flash as fa, hopper  # noqa: E402
from microgpt.kernels.attention import hopper_backward as hb  # noqa: E402
from microgpt.kernels.attention.hopper_backward import BackwardTile as BT  # noqa: E402

SHAPES = {"120m": (16, 12, 1024, 64), "4096": (4, 12, 4096, 64), "d128": (8, 16, 2048, 128)}
from microgpt.kernels.attention.flash import FlashTile  # noqa: E402


def variants(D, shape_name):
    """(dq tile, dk/dv tile) pairs: the defaults, each pass varied alone beside the other's
    default, and the mma.sync dq pass beside dk/dv tiles (the dk/dv pass's own time)."""
    mma = fa.default_tile(D, "dq")
    dq0, dkdv0 = hb.default_tile(D, "dq"), hb.default_tile(D, "dkdv")
    if shape_name == "120m":
        return [(mma, dkdv0), (mma, BT(2, 64, 8)), (dq0, dkdv0), (BT(2, 64, 8), BT(2, 64, 8))]
    if D == 64:
        dqs, dkdvs = [BT(2, 64, 8)], [BT(2, 64, 8)]
    else:
        dqs, dkdvs = [], [BT(2, 32, 8)]
    return ([(dq0, dkdv0)] + [(t, dkdv0) for t in dqs] + [(mma, dkdv0)]
            + [(mma, t) for t in dkdvs])


def text(tiles):
    return " / ".join(("mma.sync " if isinstance(t, FlashTile) else "") + str(tuple(t))
                      for t in tiles)

parser = argparse.ArgumentParser()
parser.add_argument("--warm", nargs=2, type=int)
parser.add_argument("--reps", type=int, default=20)
parser.add_argument("--shapes", nargs="+", default=["120m", "4096", "d128"])
parser.add_argument("--sdpa", nargs="*", default=[], help="the shapes to time SDPA at")
args = parser.parse_args()
if os.environ.get("TIME_BWD_TINY"):        # a check of this script in the simulator
    import benchmarks.attention
    SHAPES = {"120m": (1, 1, 40, 64)}
    graph_time = lambda fn, reps: (fn(0), 1.0)[1]  # noqa: E731
    variants = lambda D, name: [(BT(1, 64, 4), BT(1, 64, 4)), (fa.default_tile(D, "dq"), BT(1, 32, 4))]  # noqa: E731


def arrays(shape, seed=0):
    rng = np.random.default_rng(seed)
    host = [rng.standard_normal(shape, np.float32) for _ in range(4)]
    q, k, v, dout = (cuda.to_device(x.astype(ml_dtypes.bfloat16).view(np.uint16)) for x in host)
    out, dq, dk, dv = (cuda.device_array(shape, np.uint16) for _ in range(4))
    lse, delta = (cuda.device_array(shape[:3], np.float32) for _ in range(2))
    fa.flash_attention_forward(out, lse, q, k, v)
    return host, (dq, dk, dv, delta, dout, q, k, v, out, lse)


def rel(got, want):
    return np.linalg.norm(got - want) / np.linalg.norm(want)



if args.warm:
    part, parts = args.warm
    todo = list(dict.fromkeys((SHAPES[name][3], t) for name in args.shapes
                              for t in variants(SHAPES[name][3], name)))[part::parts]
    for D, tile in todo:
        t0 = time.time()
        _, a = arrays((1, 2, 1024, D))
        try:
            hb.hopper_attention_backward(*a, tiles=tile)
            cuda.synchronize()
        except ValueError as e:
            print(f"warm D {D} {text(tile)}: {e}")
            continue
        print(f"warm D {D} {text(tile)} {time.time() - t0:.1f} s", flush=True)
    sys.exit(0)

rows = []
for name in args.shapes:
    shape = SHAPES[name]
    B, H, T, D = shape
    flops = 2 * B * H * T * T * D            # causal: 4BHT²D/2 a product-pair
    host, a = arrays(shape)
    dq, dk, dv, delta, dout, q, k, v, out, lse = a
    fa.flash_attention_backward(*a)
    # the check's batch (all heads, all rows): the host's float64 of a whole andrea-120m
    # gradient takes a second a variant
    want = [bf16_host(x[:1]) for x in (dq, dk, dv)]
    dq_tile = fa.default_tile(D, "dq")

    def dq_pass(stream):
        fa._dq_kernel(D, dq_tile)[(fa.ceil_div(T, dq_tile.rows), H, B), dq_tile.threads, stream](
            dq, delta, dout, q, k, v, out, lse)

    t_fwd = graph_time(lambda s: hopper.hopper_attention_forward(out, lse, q, k, v, stream=s),
                       args.reps) if hopper.takes(q, k, v) else float("nan")
    fa.flash_attention_forward(out, lse, q, k, v)
    t_dq = graph_time(dq_pass, args.reps)
    t_mma = graph_time(lambda s: fa.flash_attention_backward(*a, stream=s), args.reps)
    print(f"{name} {shape}: wgmma fwd {t_fwd:.4f} ms; mma.sync bwd {t_mma:.4f} ms (dq pass "
          f"{t_dq:.4f}, dk/dv {t_mma - t_dq:.4f}: {2.5 * flops / t_mma / 1e9:.0f} TFLOP/s)",
          flush=True)
    best = None
    for tile in variants(D, name):
        for x in (dq, dk, dv):
            x.copy_to_device(np.full(shape, 0xFFFF, np.uint16))
        hb.hopper_attention_backward(*a, tiles=tile)
        errors = [rel(bf16_host(x[:1]), w) for x, w in zip((dq, dk, dv), want)]
        if not max(errors) < 1e-2:
            print(f"  wgmma {text(tile)}: differs from mma.sync's (dq, dk, dv {errors}): not timed")
            continue
        t = graph_time(lambda s, tile=tile: hb.hopper_attention_backward(*a, tiles=tile, stream=s),
                       args.reps)
        print(f"  wgmma bwd {text(tile)}: {t:.4f} ms ({2.5 * flops / t / 1e9:.0f} TFLOP/s); "
              f"less the mma.sync dq pass {t - t_dq:.4f}; errors "
              + ", ".join(f"{e:.1e}" for e in errors), flush=True)
        best = min(best or (t, tile), (t, tile), key=lambda x: x[0])
    if name in args.sdpa:
        from benchmarks.attention import time_sdpa
        r = time_sdpa(host, args.reps)
        print(f"  SDPA: flash fwd {r.get('flash_fwd', 0):.4f} fwd+bwd {r.get('flash_both', 0):.4f};"
              f" cuDNN fwd {r.get('cudnn_fwd', 0):.4f} fwd+bwd {r.get('cudnn_both', 0):.4f}",
              flush=True)
    rows.append((name, t_fwd, t_mma, best))
print("summary (graph ms): shape, wgmma fwd, mma.sync bwd, best wgmma bwd (tile)")
for name, t_fwd, t_mma, best in rows:
    print(f"  {name}: {t_fwd:.4f}, {t_mma:.4f}, " + (f"{best[0]:.4f} {text(best[1])}" if best else "-"))
