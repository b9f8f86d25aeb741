"""Session 21 (attn; session 20's script, the routed set "R" added): flash attention's passes at the issue's shapes, graph-replayed, beside
SDPA's flash and cuDNN backends in the same process; each wgmma variant's dq, dk, dv
first compared with the mma.sync backward's (batch 0).

python3 time_attn.py [--shapes 120m 4096 d128 12m] [--reps N] [--warm PART PARTS]
                    [--sdpa SHAPE...] [--variants A|B] [--sdpa-eager]
--warm: compile every PARTS-th variant from PART on at a small shape, no timing.
--sdpa: the shapes to time SDPA at (default all); --sdpa-eager: also its eager launches.
"""
import argparse
import os
import sys
import time

sys.path.insert(0, "tools")
import ml_dtypes  # noqa: E402
import numpy as np  # noqa: E402
from numba import cuda  # noqa: E402

from benchmarks.attention import bf16_host, graph_time  # noqa: E402
from microgpt.kernels import attention, cache  # noqa: E402
from microgpt.kernels.attention import flash as fa, flash_backward as fb, hopper  # noqa: E402
from microgpt.kernels.attention import hopper_backward as hb  # noqa: E402
from microgpt.kernels.attention.flash import FlashTile  # noqa: E402
from microgpt.kernels.attention.hopper_backward import BackwardTile as BT  # noqa: E402

SHAPES = {"120m": (16, 12, 1024, 64), "4096": (4, 12, 4096, 64), "d128": (8, 16, 2048, 128),
          "12m": (64, 12, 256, 32)}


def variants(D, which):
    """(dq tile, dk/dv tile): the wgmma defaults, the mma.sync dq pass beside the default
    dk/dv pass (the dk/dv pass's own time is the backward's less the mma.sync dq pass's),
    each wgmma pass's other tiles beside the other's default (one warpgroup a block, two or
    three blocks an SM: a block's start and end under another's walk). which: the set of
    call A, B (after A's figures) or C (the routed defaults)."""
    if D not in hb.WIDTHS:
        return []
    mma = fa.default_tile(D, "dq")
    dq0, dkdv0 = hb.default_tile(D, "dq"), hb.default_tile(D, "dkdv")
    if which == "R":        # call B: the routed defaults; at D 64 beside mma.sync's dq pass
        # and other tiles of either pass (two-warpgroup dk/dv tiles only: call A's fault)
        return [(dq0, dkdv0)] + ([(mma, dkdv0), (BT(2, 64, 8, 1, True), dkdv0),
                                  (BT(1, 64, 4, 2), dkdv0), (dq0, BT(2, 64, 4)),
                                  (dq0, BT(2, 32, 8))] if D == 64 else [])
    if which == "S":        # call C: the new defaults (dq: a producer warp at D 64), beside
        # session 20's dq default and the one-warpgroup dk/dv tiles, now correct
        return [(dq0, dkdv0)] + ([(BT(1, 32, 4, 3), dkdv0), (dq0, BT(1, 64, 4, 2))]
                                 if D == 64 else [])
    if which == "C":        # the routed defaults, beside a producer warp's dq pass
        return ([(dq0, dkdv0)] + ([(BT(2, 64, 8, 1, True), dkdv0)] if D == 64 else [])
                + [(mma, dkdv0)])
    if which == "A":
        if D == 64:
            dqs = [BT(2, 64, 8), BT(1, 64, 4, 2), BT(1, 32, 4, 3)]
            dkdvs = [BT(1, 64, 4, 2), BT(1, 32, 4, 2), BT(1, 32, 4, 3)]
        else:
            dqs, dkdvs = [BT(1, 32, 4, 2)], [BT(1, 32, 4, 2), BT(2, 32, 8)]
    elif D == 64:
        dqs = [BT(2, 64, 8), BT(1, 32, 4, 3), BT(2, 32, 4, 2), BT(2, 64, 8, 1, True)]
        dkdvs = [BT(1, 64, 4, 2)]
    else:
        dqs, dkdvs = [BT(1, 32, 4, 2), BT(2, 64, 4)], [BT(2, 32, 8), BT(2, 64, 4)]
    return ([(dq0, dkdv0), (mma, dkdv0)] + [(t, dkdv0) for t in dqs]
            + [(mma, t) for t in dkdvs])


def text(tiles):
    return " / ".join(("mma.sync " if isinstance(t, FlashTile) else "") + str(tuple(t))
                      for t in tiles)


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


def sdpa_times(host, reps, eager):
    """SDPA flash and cuDNN: forward and forward + backward, eager (torch events) and, where
    torch captures it, replayed in a CUDA graph (eager only if asked)."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    q, k, v = (torch.from_numpy(x).cuda().bfloat16().requires_grad_() for x in host[:3])
    dout = torch.from_numpy(host[3]).cuda().bfloat16()
    rows = {}
    for name, backend in (("flash", SDPBackend.FLASH_ATTENTION),
                          ("cudnn", SDPBackend.CUDNN_ATTENTION)):
        with sdpa_kernel(backend):
            fwd = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True)  # noqa: E731
            both = lambda: torch.autograd.grad(fwd(), (q, k, v), dout)  # noqa: E731
            for kind, fn in (("fwd", fwd), ("both", both)):
                try:
                    if eager:
                        rows[f"{name} {kind} eager"] = torch_eager(fn, reps)
                    rows[f"{name} {kind} graph"] = torch_graph(fn, reps)
                except RuntimeError as e:
                    print(f"  SDPA {name} {kind}: {str(e).splitlines()[0][:120]}")
    return rows


def torch_eager(fn, reps):
    import torch
    for _ in range(3):
        fn()
    best = float("inf")
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(10):
            fn()
        b.record()
        b.synchronize()
        best = min(best, a.elapsed_time(b) / 10)
    return best


def torch_graph(fn, reps, launches=10):
    import torch
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(launches):
            fn()
    best = float("inf")
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        best = min(best, a.elapsed_time(b) / launches)
    return best


parser = argparse.ArgumentParser()
parser.add_argument("--warm", nargs=2, type=int)
parser.add_argument("--reps", type=int, default=10)
parser.add_argument("--shapes", nargs="+", default=list(SHAPES))
parser.add_argument("--sdpa", nargs="*", default=None)
parser.add_argument("--sdpa-eager", action="store_true")
parser.add_argument("--variants", default="A")
args = parser.parse_args()
if os.environ.get("MICROGPT_TEST_KERNEL_CACHE"):     # the tests' carried kernels
    cache.use(os.environ["MICROGPT_TEST_KERNEL_CACHE"])
print("HOPPER_BACKWARD", attention.HOPPER_BACKWARD, flush=True)

if args.warm:
    # per width the mma.sync passes and the wgmma forward (None), then the wgmma variants
    part, parts = args.warm
    widths = dict.fromkeys(SHAPES[n][3] for n in args.shapes)
    todo = ([(D, None) for D in widths]
            + list(dict.fromkeys((SHAPES[n][3], t) for n in args.shapes
                                 for t in variants(SHAPES[n][3], args.variants))))[part::parts]
    for D, tile in todo:
        t0 = time.time()
        _, a = arrays((1, 2, 1024, D))
        if tile is None:
            fb.flash_attention_backward(*a)
            if D in hb.WIDTHS:
                hopper.hopper_attention_forward(a[8], a[9], a[5], a[6], a[7])
        else:
            try:
                hb.hopper_attention_backward(*a, tiles=tile)
            except ValueError as e:
                print(f"warm D {D} {text(tile)}: {e}")
                continue
        cuda.synchronize()
        print(f"warm D {D} {text(tile) if tile else 'mma.sync, wgmma forward'} "
              f"{time.time() - t0:.1f} s", flush=True)
    sys.exit(0)

table = []
t_start = time.time()
for name in args.shapes:
    shape = SHAPES[name]
    B, H, T, D = shape
    flops = 2 * B * H * T * T * D            # causal forward: 4BHT^2D/2; backward 2.5x
    host, a = arrays(shape)
    dq, dk, dv, delta, dout, q, k, v, out, lse = a
    fb.flash_attention_backward(*a)
    want = [bf16_host(x[:1]) for x in (dq, dk, dv)]
    dq_tile = fa.default_tile(D, "dq")

    def dq_pass(stream):
        fb._dq_kernel(D, dq_tile)[(fa.ceil_div(T, dq_tile.rows), H, B), dq_tile.threads, stream](
            dq, delta, dout, q, k, v, out, lse)

    row = {"mma fwd": graph_time(lambda s: fa.flash_attention_forward(out, lse, q, k, v,
                                                                      stream=s), args.reps)}
    if hopper.takes(q, k, v):
        row["wgmma fwd"] = graph_time(
            lambda s: hopper.hopper_attention_forward(out, lse, q, k, v, stream=s), args.reps)
        # its out and lse against mma.sync's (batch 0)
        got_out, got_lse = bf16_host(out[:1]), lse[:1].copy_to_host()
        fa.flash_attention_forward(out, lse, q, k, v)
        print(f"  wgmma fwd against mma.sync's: out {rel(got_out, bf16_host(out[:1])):.1e}, lse "
              f"{np.abs(got_lse - lse[:1].copy_to_host()).max():.1e}", flush=True)
    row["op fwd+bwd"] = graph_time(lambda s: (attention.attention_forward(out, lse, q, k, v,
                                                                       stream=s),
                                              attention.attention_backward(*a, stream=s)),
                                   args.reps)
    fa.flash_attention_forward(out, lse, q, k, v)
    row["mma dq"] = graph_time(dq_pass, args.reps)
    row["mma bwd"] = graph_time(lambda s: fb.flash_attention_backward(*a, stream=s), args.reps)
    print(f"{name} {shape}: " + ", ".join(f"{key} {ms:.4f}" for key, ms in row.items())
          + f" ms; mma dk/dv {row['mma bwd'] - row['mma dq']:.4f}", flush=True)
    for tile in variants(D, args.variants):
        for x in (dq, dk, dv):
            x.copy_to_device(np.full(shape, 0xFFFF, np.uint16))
        try:
            hb.hopper_attention_backward(*a, tiles=tile)
        except ValueError as e:
            print(f"  wgmma {text(tile)}: {e}")
            continue
        errors = [rel(bf16_host(x[:1]), w) for x, w in zip((dq, dk, dv), want)]
        if not max(errors) < 1e-2:
            print(f"  wgmma {text(tile)}: differs from mma.sync's (dq, dk, dv {errors}): not timed")
            continue
        t = graph_time(lambda s, tile=tile: hb.hopper_attention_backward(*a, tiles=tile, stream=s),
                       args.reps)
        row[f"wgmma bwd {text(tile)}"] = t
        print(f"  wgmma bwd {text(tile)}: {t:.4f} ms ({2.5 * flops / t / 1e9:.0f} TFLOP/s); less "
              f"the mma.sync dq pass {t - row['mma dq']:.4f}; errors "
              + ", ".join(f"{e:.1e}" for e in errors), flush=True)
    if args.sdpa is None or name in args.sdpa:
        for key, ms in sdpa_times(host, args.reps, args.sdpa_eager).items():
            row[f"sdpa {key}"] = ms
            print(f"  SDPA {key}: {ms:.4f} ms", flush=True)
    table.append((name, shape, flops, row))
    print(f"  ({time.time() - t_start:.0f} s)", flush=True)
    del a

print("\n| shape | kernel | ms | TFLOP/s |\n|---|---|---:|---:|")
for name, shape, flops, row in table:
    for key, ms in row.items():
        work = (None if key == "mma dq" else 3.5 * flops if "both" in key or "+" in key
                else flops if "fwd" in key else 2.5 * flops)
        print(f"| {name} {shape} | {key} | {ms:.4f} | "
              + (f"{work / ms / 1e9:.0f}" if work else "") + " |")
