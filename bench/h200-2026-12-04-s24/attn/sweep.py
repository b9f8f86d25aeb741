"""Session 24 (attn; from session 23's):
the wgmma forward's tiles (tools/benchmarks/attention.py's
hopper_variants with sweep: the default by T first) at the issue's shapes, each checked
against mma.sync's forward and timed eager and in a CUDA graph (time_hopper_attention),
beside SDPA cuDNN's forward and forward + backward captured (ab.py's cudnn),
through the kernel cache the device calls carry; --backward instead the wgmma backward's
tile pairs at andrea-120m and D 128 (BACKWARD), each checked against the defaults'
gradients and timed in a graph; --warm compiles them at T 1027 / 4099.

python3 sweep.py [--shapes 120m 4096 d128] [--reps N] [--warm] [--backward]
(--shapes by default: all three, or with --backward 120m and d128)"""
import argparse
import os
import sys

sys.path.insert(0, "tools")
import ml_dtypes  # noqa: E402
import numpy as np  # noqa: E402
from numba import cuda  # noqa: E402

from ab import cudnn  # noqa: E402
from benchmarks.attention import bf16_host, graph_time, time_hopper_attention  # noqa: E402
from microgpt.kernels import attention, cache  # noqa: E402
from microgpt.kernels.attention import hopper_backward  # noqa: E402
from microgpt.kernels.attention.hopper_backward import BackwardTile as BT  # noqa: E402

SHAPES = {"120m": (16, 12, 1024, 64), "4096": (4, 12, 4096, 64), "d128": (8, 16, 2048, 128)}
# (dq tile, dk/dv tile) by head_dim, the defaults first, each pass varied alone, then
# both passes with a producer warpgroup donating its registers (DONATE). At D 64 the dk/dv
# pass as blocks of one warpgroup, two or three an SM (a block's start and end under
# another's walk: session 19 timed (1, 64, 3, 2) before the 8 stages), and four stages;
# the dq pass likewise. At D 128 (sm_90a: none spills; the dk/dv pass's (1, 64, 4) took 254
# registers and is left out) the dq pass's steps of 64 keys (two warpgroups with a
# donating producer), the dk/dv pass's blocks of one warpgroup two an SM, its 8 stages.
DONATE = {64: BT(2, 64, 8, 1, True, True), 128: BT(2, 32, 4, 1, True, True)}
BACKWARD = {64: [(None, None), (None, BT(1, 64, 4, 2)), (None, BT(1, 32, 4, 3)),
                 (None, BT(2, 64, 4)), (BT(1, 64, 4, 2, True), None),
                 (BT(2, 64, 4, 1, True), None), (None, DONATE[64]), (DONATE[64], None),
                 (DONATE[64], DONATE[64])],
            128: [(None, None), (BT(2, 32, 4, 1), None), (BT(1, 64, 4, 1), None),
                  (BT(2, 64, 4, 1), None), (BT(2, 64, 4, 1, True, True), None), (None, BT(1, 32, 4, 2)),
                  (None, BT(2, 32, 8)), (None, DONATE[128])]}


def sweep_backward(arrays, reps):
    """The BACKWARD pairs' gradients against the defaults' (1e-2 relative), and their ms
    in a graph."""
    dq, dk, dv = arrays[:3]
    want = None
    for tiles in BACKWARD[dq.shape[3]]:
        def backward(stream, tiles=tiles):
            hopper_backward.hopper_attention_backward(*arrays, tiles=tiles, stream=stream)
        backward(0)
        got = [bf16_host(x) for x in (dq, dk, dv)]
        want = want or got
        errors = [np.linalg.norm(g - w) / np.linalg.norm(w) for g, w in zip(got, want)]
        label = ", ".join("default" if t is None else str(tuple(t)) for t in tiles)
        if max(errors) > 1e-2:
            print(f"  backward {label}: differs from the defaults' ({max(errors):.1e}): "
                  "not timed", flush=True)
            continue
        print(f"  backward {label}: {graph_time(backward, reps):.4f} ms in a graph",
              flush=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--shapes", nargs="+", default=None)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--warm", action="store_true")
    parser.add_argument("--backward", action="store_true")
    args = parser.parse_args()
    args.shapes = args.shapes or (["120m", "d128"] if args.backward else list(SHAPES))
    if os.environ.get("MICROGPT_TEST_KERNEL_CACHE"):
        cache.use(os.environ["MICROGPT_TEST_KERNEL_CACHE"])
    for name in args.shapes:
        shape = SHAPES[name]
        if args.warm:
            shape = (1, 2, 4099 if shape[2] >= 4096 else 1027, shape[3])
        rng = np.random.default_rng(0)
        host = [rng.standard_normal(shape, np.float32) for _ in range(4)]
        q, k, v, dout = (cuda.to_device(x.astype(ml_dtypes.bfloat16).view(np.uint16))
                         for x in host)
        out, dq, dk, dv = (cuda.device_array(shape, np.uint16) for _ in range(4))
        lse, delta = (cuda.device_array(shape[:3], np.float32) for _ in range(2))
        print(f"{name} {shape}", flush=True)
        if not args.warm:
            cf, cboth = cudnn(host, args.reps)
            print(f"  SDPA cuDNN: fwd {cf:.4f} ms, fwd+bwd {cboth:.4f} (captured, the same "
                  "process)", flush=True)
        if args.backward:
            attention.attention_forward(out, lse, q, k, v)
            sweep_backward((dq, dk, dv, delta, dout, q, k, v, out, lse),
                           2 if args.warm else args.reps)
            continue
        row = time_hopper_attention((out, lse, q, k, v), lambda: attention.attention_backward(
            dq, dk, dv, delta, dout, q, k, v, out, lse), 2 if args.warm else args.reps,
            sweep=True)
        print(f"  default: fwd {row.get('hopper_fwd_graph', float('nan')):.4f} ms in a graph",
              flush=True)


if __name__ == "__main__":
    main()
