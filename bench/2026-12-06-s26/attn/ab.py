"""Session 26 (attn): the wgmma backward's changes one at a time against main's kernels, in
one process, beside cuDNN. Each variant is a module and the tiles it runs with:
- main: main's kernels (bench/h200-2026-12-04-s24/attn/main_kernels/, generated from
  kernels/attention at 133880f, which main's are still: their sha1 printed), its defaults;
- this: this tree's kernels/attention/hopper_backward.py, its defaults;
- MODULE:TILES: MODULE this tree's, or a patch NAME (NAME.diff.txt in this folder: a
  unified diff of hopper_backward.py, made by `git diff`) applied to this tree's file,
  written as a module of its own under $TMPDIR/s26attn (only when its text changed: the
  kernel cache keys a kernel on its module's source); TILES a set of TILES below: "main"
  (main's default tiles), "this" (the module's defaults), or a candidate's.
Each backward is replayed in a CUDA graph (benchmarks.attention.graph_time: 20 launches,
the fastest of --reps replays), the variants timed in turn, then again in the reverse
order, the faster kept; each result checked against mma.sync's (flash_backward.py).
cuDNN's forward and forward + backward (SDPA's cuDNN backend, captured), its backward
alone their difference. ms and TFLOP/s (causal: 2 B H T^2 D forward, 2.5 times that
backward).

python3 ab.py [--shapes 120m 4096 d128] [--variants main this b1:main ...] [--reps N] [--warm]
(--warm: each variant once at small shapes of the same widths, untimed: the kernel cache;
--prepare: only write the patched modules, before processes in parallel import them: the
kernel cache stores nothing of a module whose file changed after the cache was imported)"""
import argparse
import hashlib
import importlib
import os
import re
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
MAIN = os.path.join(HERE, "..", "..", "h200-2026-12-04-s24", "attn", "main_kernels")
FOLDER = os.path.join(tempfile.gettempdir(), "s26attn")
sys.path[:0] = ["tools", MAIN, FOLDER]
SHAPES = {"120m": (16, 12, 1024, 64), "4096": (4, 12, 4096, 64), "d128": (8, 16, 2048, 128)}
# (dq, dk/dv) tiles by head_dim (None: the module's default; a width missing: the variant
# not run there): main's defaults (hopper_backward.default_tile at 133880f), this tree's,
# and candidates
TWO = (1, 64, 4, 2, True, True)             # one computing warpgroup and a donating
TWO_128 = (1, 32, 4, 2, True, True)         # producer, two blocks an SM (232 registers)
TILES = {"main": {64: ((2, 64, 8, 1, True), (2, 64, 8)), 128: ((1, 32, 4, 2), (2, 32, 4))},
         "this": {64: (None, None), 128: (None, None)},
         # the dq pass at D 64 as one warpgroup and a producer warp, two blocks an SM (s24
         # call B: 0.3028 against 0.3123 ms beside the then default dk/dv pass)
         "dq2": {64: ((1, 64, 4, 2, True), None)},
         "dq2d": {64: (TWO, None), 128: (TWO_128, None)},
         "kv2d": {64: (None, TWO), 128: (None, TWO_128)},
         # session 28: dq folded into the dk/dv pass by bulk tensor adds (no dq pass; D 64
         # only), the default dk/dv tile's layout (hopper_backward.FOLD_TILE)
         "fold": {64: (None, (2, 64, 8, 1, True, True, True))}}
SOURCE = os.path.join(HERE, "..", "..", "..", "kernels", "attention", "hopper_backward.py")
VARIANTS = ["main", "this", "b1:main", "b2:main", "b2:this", "this:dq2", "this:dq2d",
            "this:kv2d", "this:fold"]


def patched(text, diff):
    """text with diff's hunks applied, each by its old lines found once (no fuzz)."""
    for hunk in re.split(r"^@@[^\n]*\n", diff, flags=re.M)[1:]:
        lines = [x for x in hunk.split("\n") if x[:1] in (" ", "-", "+")]
        old = "".join(x[1:] + "\n" for x in lines if x[0] != "+")
        new = "".join(x[1:] + "\n" for x in lines if x[0] != "-")
        if text.count(old) != 1:
            raise SystemExit(f"a hunk's old lines are found {text.count(old)} times")
        text = text.replace(old, new)
    return text


def absolute(text):
    """A module of kernels/attention as a top-level one (its relative imports absolute)."""
    text = re.sub(r"^(\s*)from \.\.([a-z_.]*) import", r"\1from microgpt.kernels.\2 import",
                  text, flags=re.M)
    text = re.sub(r"^(\s*)from \. import", r"\1from microgpt.kernels.attention import",
                  text, flags=re.M)
    return re.sub(r"^(\s*)from \.([a-z_]+) import", r"\1from microgpt.kernels.attention.\2 import",
                  text, flags=re.M)


def write_patched(name):
    """FOLDER/s26_NAME_hopper_backward.py: this tree's file with NAME.diff.txt applied,
    written only if its text differs (a rewrite would change its time, not its key)."""
    os.makedirs(FOLDER, exist_ok=True)
    with open(SOURCE) as f, open(os.path.join(HERE, f"{name}.diff.txt")) as d:
        text = absolute(patched(f.read(), d.read()))
    path = os.path.join(FOLDER, f"s26_{name}_hopper_backward.py")
    if not os.path.exists(path) or open(path).read() != text:
        part = f"{path}.{os.getpid()}"
        with open(part, "w") as f:
            f.write(text)
        os.replace(part, path)


def variant(spec, D):
    """(module, tiles) of a variant's spec: main (main's kernels), this (this tree's), or
    MODULE:TILES, MODULE this or a patch's name, TILES a key of TILES."""
    if spec == "main":
        return importlib.import_module("main_hopper_backward"), (None, None)
    name, tiles = spec.split(":") if ":" in spec else (spec, "this")
    module = importlib.import_module("microgpt.kernels.attention.hopper_backward"
                                     if name == "this" else f"s26_{name}_hopper_backward")
    return module, TILES[tiles].get(D)


def cudnn(host, reps):
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    q, k, v = (torch.from_numpy(x).cuda().bfloat16().requires_grad_() for x in host[:3])
    dout = torch.from_numpy(host[3]).cuda().bfloat16()
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        def fwd():
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return (torch_captured_time(fwd, reps),
                torch_captured_time(lambda: torch.autograd.grad(fwd(), (q, k, v), dout), reps))


def sha1(path):
    with open(path, "rb") as f:
        return hashlib.sha1(f.read()).hexdigest()[:12]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--shapes", nargs="+", default=list(SHAPES))
    parser.add_argument("--variants", nargs="+", default=VARIANTS)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--warm", action="store_true")
    parser.add_argument("--prepare", action="store_true")
    args = parser.parse_args()
    for name in sorted({spec.split(":")[0] for spec in args.variants} - {"main", "this"}):
        write_patched(name)
    sys.path_importer_cache.pop(FOLDER, None)      # (made now, it was not there at start)
    importlib.invalidate_caches()
    if args.prepare:
        return
    global np, cuda, bf16_host, graph_time, torch_captured_time
    import ml_dtypes
    import numpy as np
    from numba import cuda

    from benchmarks.attention import bf16_host, graph_time
    from benchmarks.timing import torch_captured_time
    from microgpt.kernels import cache
    from microgpt.kernels.attention import flash_backward, hopper
    if os.environ.get("MICROGPT_TEST_KERNEL_CACHE"):
        cache.use(os.environ["MICROGPT_TEST_KERNEL_CACHE"])
    print("sha1: main_kernels", *(f"{f} {sha1(os.path.join(MAIN, f))}"
                                  for f in sorted(os.listdir(MAIN)) if f.endswith(".py")),
          f"this hopper_backward.py {sha1(SOURCE)}", flush=True)
    for name in args.shapes:
        shape = SHAPES[name]
        if args.warm:
            shape = (1, 2, 4099 if shape[2] >= 4096 else 1027, shape[3])
        B, H, T, D = shape
        flops = 2 * B * H * T * T * D
        rng = np.random.default_rng(0)
        host = [rng.standard_normal(shape, np.float32) for _ in range(4)]
        q, k, v, dout = (cuda.to_device(x.astype(ml_dtypes.bfloat16).view(np.uint16))
                         for x in host)
        out, dq, dk, dv = (cuda.device_array(shape, np.uint16) for _ in range(4))
        lse, delta = (cuda.device_array(shape[:3], np.float32) for _ in range(2))
        hopper.hopper_attention_forward(out, lse, q, k, v)
        flash_backward.flash_attention_backward(dq, dk, dv, delta, dout, q, k, v, out, lse)
        want = [bf16_host(x) for x in (dq, dk, dv)]
        zeros = np.zeros(shape, np.uint16)
        print(f"{name} {shape}:", flush=True)
        launches = {}
        for spec in args.variants:
            module, tiles = variant(spec, D)
            if tiles is None:
                continue

            def backward(s, module=module, tiles=tiles):
                module.hopper_attention_backward(dq, dk, dv, delta, dout, q, k, v, out, lse,
                                                 tiles=tiles, stream=s)

            for x in (dq, dk, dv):
                x.copy_to_device(zeros)
            backward(0)
            cuda.synchronize()
            errors = [np.linalg.norm(bf16_host(g) - w) / np.linalg.norm(w)
                      for g, w in zip((dq, dk, dv), want)]
            print(f"  {spec} rel. to mma.sync (dq dk dv) " + " ".join(f"{e:.1e}" for e in errors),
                  flush=True)
            if max(errors) > 1e-2:
                raise SystemExit(f"{spec}: its gradients differ from mma.sync's")
            launches[spec] = backward
        if args.warm:
            continue
        best, run = {}, list(launches)
        for order in (run, run[::-1]):
            for spec in order:
                best[spec] = min(best.get(spec, float("inf")),
                                 graph_time(launches[spec], args.reps))
        for spec in run:
            b = best[spec]
            print(f"  {spec} bwd {b:.4f} ms ({2.5 * flops / b / 1e9:.0f} TFLOP/s) "
                  f"{b / best[run[0]]:.3f}x {run[0]}'s", flush=True)

        def forward(s):
            hopper.hopper_attention_forward(out, lse, q, k, v, stream=s)

        this = launches.get("this", launches[run[0]])
        f = graph_time(forward, args.reps)
        both = graph_time(lambda s: (forward(s), this(s)), args.reps)
        cf, cboth = cudnn(host, args.reps)
        print(f"  this fwd {f:.4f} ms ({flops / f / 1e9:.0f}) fwd+bwd {both:.4f} "
              f"({3.5 * flops / both / 1e9:.0f})\n  cuDNN fwd {cf:.4f} ({flops / cf / 1e9:.0f}) "
              f"bwd {cboth - cf:.4f} fwd+bwd {cboth:.4f} ({3.5 * flops / cboth / 1e9:.0f})\n"
              f"  this / cuDNN: fwd {f / cf:.2f}x, fwd+bwd {both / cboth:.2f}x", flush=True)


if __name__ == "__main__":
    main()
