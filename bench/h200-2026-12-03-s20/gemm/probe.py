"""Session 20's GEMM probe: every product of an andrea-120m and an andrea-12m step with each
wgmma variant, beside cuBLAS (torch.mm, bf16 out) in the same process.

python3 probe.py check [CONFIG...]   each variant once against torch.mm in float32 (TF32
                                     off) of the same bf16 operands: relative error
VARIANTS=a,b python3 probe.py ... (those of VARIANTS only)
python3 probe.py time [CONFIG...]    captured (20 launches a graph, best of REPS replays),
                                     torch.mm eager; a row a product, flushed as it goes
python3 probe.py ncu NAME CONFIG VARIANT...   two launches of each variant of one product
                                     (VARIANT: a key of VARIANTS or "torch"), the second
                                     between cuda.profile_start/stop, for ncu
                                     --profile-from-start off

MICROGPT_CACHE_DIR keeps the compiled kernels between the calls' scripts.
"""
import math
import os
import sys
import time

import numpy as np
from numba import cuda
from numba.cuda.cudadrv.driver import device_memset

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "tools"))
from benchmarks.timing import captured_time, torch_time  # noqa: E402

from microgpt.cuda_backend import CudaBackend  # noqa: E402
from microgpt.gemms import step_products  # noqa: E402
from microgpt.kernels import cache  # noqa: E402
from microgpt.kernels.gemm import bf16 as gemm_bf16, tuning  # noqa: E402
from microgpt.kernels.gemm.tiles import PersistentTile  # noqa: E402

CONFIGS = {"andrea-120m": (16, 1024, 768, 50304), "andrea-12m": (64, 256, 384, 4096)}
# "default": the launcher's tile; "wgmma": the wgmma kernel's tiles, as before the routing
# to the persistent ones (tuning.default_tile without persistent)
VARIANTS = {"default": None, "wgmma": "wgmma", "persist": tuning.PERSISTENT_TILE,
            "persist192": PersistentTile(128, 192, 64, 4, 2), "copier": tuning.COPIER_TILE,
            "copier192": PersistentTile(128, 192, 64, 4, 2, copier=True),
            "pingpong": tuning.PINGPONG_TILE,
            "pingpong64": PersistentTile(64, 256, 64, 4, 2, copier=True, pingpong=True),
            "copier_c2": PersistentTile(128, 256, 64, 4, 2, cluster=2, copier=True)}
REPS = int(os.environ.get("REPS", "5"))


def variants_for(N):
    """The 192-wide persistent tiles only where 256 does not divide N and 192 does."""
    chosen = os.environ.get("VARIANTS", ",".join(VARIANTS)).split(",")
    return [v for v in VARIANTS if v in chosen
            and (not v.endswith("192") or (N % 256 and N % 192 == 0))]


def operands(M, N, K, ta, tb, epilogue, rng):
    """bf16 operands drawn on the GPU by torch (the LM head's (16384, 50304) would take
    NumPy seconds), shared with numba as uint16 views; out numba's."""
    import torch
    gen = torch.Generator(device="cuda").manual_seed(int(rng.integers(2**31)))
    a = torch.randn((K, M) if ta else (M, K), device="cuda", generator=gen).bfloat16()
    b = torch.randn((N, K) if tb else (K, N), device="cuda", generator=gen).bfloat16()
    bf16_out = epilogue not in ("accumulate", "float32")
    # (through int16, which every torch's array interface names)
    return (cuda.as_cuda_array(a.view(torch.int16)).view(np.uint16),
            cuda.as_cuda_array(b.view(torch.int16)).view(np.uint16),
            cuda.device_array((M, N), np.uint16 if bf16_out else np.float32),
            a.T if ta else a, b.T if tb else b)


def launch(out, da, db, ta, tb, accumulate, tile, stream=0):
    if tile == "wgmma":
        M, N = out.shape
        K = da.shape[0] if ta else da.shape[1]
        tile = tuning.default_tile(M, N, K, accumulate, True, out.dtype == np.uint16)
    gemm_bf16.matmul_bf16(out, da, db, ta, tb, accumulate, tile=tile, stream=stream)


def as_float(out):
    import torch
    t = torch.as_tensor(out.view(np.int16) if out.dtype == np.uint16 else out, device="cuda")
    return t.view(torch.bfloat16).float() if out.dtype == np.uint16 else t


def products(names):
    for config in names:
        B, T, C, V = CONFIGS[config]
        for name, M, N, K, ta, tb, epilogue in step_products(B, T, C, V):
            # the GELU epilogues are off in the model (gemm.GELU_IN_EPILOGUE): plain bf16
            yield config, name, M, N, K, ta, tb, epilogue.replace("gelu_backward", "bf16")\
                .replace("gelu", "bf16")


def check(names):
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False
    rng = np.random.default_rng(0)
    for config, name, M, N, K, ta, tb, epilogue in products(names):
        da, db, out, lhs, rhs = operands(M, N, K, ta, tb, epilogue, rng)
        ref = torch.mm(lhs.float(), rhs.float())
        accumulate = epilogue == "accumulate"
        for v in variants_for(N):
            start = time.time()
            try:
                device_memset(out, 0xFF, out.nbytes)   # poisoned (NaN)
                if accumulate:
                    device_memset(out, 0, out.nbytes)
                launch(out, da, db, ta, tb, accumulate, VARIANTS[v])
                cuda.synchronize()
                err = float(torch.linalg.norm(as_float(out) - ref) / torch.linalg.norm(ref))
                line = f"rel err {err:.2e}"
            except Exception as e:          # a variant that cannot run this product
                line = f"FAILED {type(e).__name__}: {str(e).splitlines()[0][:160]}"
            print(f"{config:12s} {name:16s} {M:6d}x{N:6d}x{K:6d} {epilogue:10s} {v:10s} "
                  f"{line}  ({time.time() - start:.1f} s)", flush=True)


def timed(names):
    ops = CudaBackend()
    rng = np.random.default_rng(0)
    rows = []
    print("| config | product | M x N x K | out | " + " | ".join(
        f"{v} ms" for v in VARIANTS) + " | cuBLAS ms | cuBLAS TFLOP/s | " + " | ".join(
        f"{v}/cuBLAS" for v in VARIANTS) + " |", flush=True)
    print("|---|---|---|---|" + "---:|" * (2 * len(VARIANTS) + 2), flush=True)
    for config, name, M, N, K, ta, tb, epilogue in products(names):
        da, db, out, lhs, rhs = operands(M, N, K, ta, tb, epilogue, rng)
        import torch
        torch_ms = torch_time(lambda: torch.mm(lhs, rhs), max(REPS, 10))
        accumulate = epilogue == "accumulate"
        ms = {}
        for v in variants_for(N):
            try:
                ms[v] = captured_time(lambda stream: launch(out, da, db, ta, tb, accumulate,
                                                            VARIANTS[v], stream), REPS, ops)
            except Exception as e:
                print(f"  {name} {v}: {type(e).__name__}: {str(e).splitlines()[0][:160]}",
                      flush=True)
        flops = 2 * M * N * K
        rows.append((config, name, ms, torch_ms))
        print(f"| {config} | {name} | {M} x {N} x {K} | {epilogue} | " + " | ".join(
            f"{ms[v]:.4f}" if v in ms else "-" for v in VARIANTS)
            + f" | {torch_ms:.4f} | {flops / torch_ms / 1e9:.0f} | " + " | ".join(
            f"{torch_ms / ms[v]:.3f}" if v in ms else "-" for v in VARIANTS) + " |",
            flush=True)
    for config in names:
        for v in VARIANTS:
            ratios = [t / ms[v] for c, _, ms, t in rows if c == config and v in ms]
            best = [t / min(ms.values()) for c, _, ms, t in rows if c == config and ms]
            if ratios:
                print(f"{config} {v}: geomean {math.exp(np.mean(np.log(ratios))):.3f} "
                      f"lowest {min(ratios):.3f} over {len(ratios)}", flush=True)
        if best:
            print(f"{config} best variant a product: geomean "
                  f"{math.exp(np.mean(np.log(best))):.3f} lowest {min(best):.3f}", flush=True)


def profile(name, config, kinds):
    import torch
    rng = np.random.default_rng(0)
    for c, n, M, N, K, ta, tb, epilogue in products([config]):
        if n == name:
            break
    else:
        raise SystemExit(f"no product {name!r} in {config}")
    da, db, out, lhs, rhs = operands(M, N, K, ta, tb, epilogue, rng)
    accumulate = epilogue == "accumulate"

    def run(kind):
        if kind == "torch":
            torch.mm(lhs, rhs)
        else:
            launch(out, da, db, ta, tb, accumulate, VARIANTS[kind])
    for kind in kinds:
        run(kind)
    torch.cuda.synchronize()
    cuda.synchronize()
    cuda.profile_start()
    for kind in kinds:
        run(kind)
        torch.cuda.synchronize()
        cuda.synchronize()
    cuda.profile_stop()
    print("profiled", name, config, kinds, flush=True)


if __name__ == "__main__":
    if os.environ.get("MICROGPT_CACHE_DIR"):
        cache.use(os.environ["MICROGPT_CACHE_DIR"])
    mode, rest = sys.argv[1], sys.argv[2:]
    if mode == "check":
        check(rest or list(CONFIGS))
    elif mode == "time":
        timed(rest or list(CONFIGS))
    elif mode == "ncu":
        profile(rest[0], rest[1], rest[2:])
    else:
        raise SystemExit(f"mode {mode!r}: check, time or ncu")
