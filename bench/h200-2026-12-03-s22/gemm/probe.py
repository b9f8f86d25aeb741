"""Session 22's GEMM probe (session 21's, with named sweeps run in one process): every
product of an andrea-120m and an andrea-12m step with each wgmma variant, beside cuBLAS
(torch.mm, bf16 out) in the same process. A variant is a tile and a split of K: a split of a written
float32 out zeroes it and adds the splits into it (the launcher's way for a long K); a
split longer than tuning.MAX_CHAIN is refused (the fold went after call B).
PRODUCTS=a,b (names as gemms.step_products, "N384": andrea-12m's float32 products of N 384
and the LM head dW's) restricts the products.

python3 probe.py check [CONFIG...]   each variant once against torch.mm in float32 (TF32
                                     off) of the same bf16 operands: relative error
VARIANTS=a,b python3 probe.py ... (those of VARIANTS only)
python3 probe.py time [CONFIG...]    captured (20 launches a graph, best of REPS replays),
                                     torch.mm eager; a row a product, flushed as it goes
python3 probe.py gelu [CONFIG...]    the MLP up forward with its GELU: the product then
                                     elementwise's GELU kernel, against the GELU epilogue of
                                     the persistent tiles and of the wgmma one (captured),
                                     each checked first against torch in float32
python3 probe.py gelu_backward [CONFIG...]   the MLP down dX with its GELU, the same three
                                     ways (the persistent kernel's, the wgmma kernel's, none)
python3 probe.py sweep NAME...       the named sweeps of SWEEPS (configs, products, variants),
                                     timed as "time" does, one after another in this process
                                     (check_sweep NAME... checks them)
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
from microgpt.kernels.common import fill_zero  # noqa: E402
from microgpt.kernels.gemm import bf16 as gemm_bf16, tuning  # noqa: E402
from microgpt.kernels.gemm.tiles import PersistentTile  # noqa: E402

CONFIGS = {"andrea-120m": (16, 1024, 768, 50304), "andrea-12m": (64, 256, 384, 4096)}
# "default": the launcher's tile; "wgmma": the wgmma kernel's tiles, as before the routing
# to the persistent ones (tuning.default_tile without persistent)
C192 = PersistentTile(128, 192, 64, 4, 2, copier=True)
C128 = PersistentTile(128, 128, 64, 6, 2, copier=True)
P64_192 = PersistentTile(64, 192, 64, 6, 2, copier=True, pingpong=True)
P64_128 = PersistentTile(64, 128, 64, 8, 2, copier=True, pingpong=True)
P128_32 = PersistentTile(128, 128, 32, 12, 2, copier=True, pingpong=True)
VARIANTS = {"default": None, "s20": "s20", "wgmma": "wgmma", "copier": tuning.COPIER_TILE,
            "pingpong": tuning.PINGPONG_TILE, "copier192": C192, "copier128": C128,
            "pp64x192": P64_192, "pp64x128": P64_128, "pp_d32": P128_32,
            # splits of K: a written float32 out zeroed and added into
            "pp_s2": (tuning.PINGPONG_TILE, 2), "c192_s2": (C192, 2),
            # the weight gradients' splits (the default: the least that fills the SMs, at
            # least K / MAX_CHAIN)
            "copier_s5": (tuning.COPIER_TILE, 5), "copier_s6": (tuning.COPIER_TILE, 6),
            "copier_s8": (tuning.COPIER_TILE, 8), "c192_s4": (C192, 4), "c192_s6": (C192, 6),
            "c192_s5": (C192, 5), "c192_s7": (C192, 7),
            "c192_s8": (C192, 8),
            "pp_s6": (tuning.PINGPONG_TILE, 6), "pp_s8": (tuning.PINGPONG_TILE, 8)}
REPS = int(os.environ.get("REPS", "5"))


def variants_for(N):
    """The 192-wide persistent tiles only where 256 does not divide N and 192 does."""
    chosen = os.environ.get("VARIANTS", ",".join(VARIANTS)).split(",")
    return [v for v in VARIANTS if v in chosen]


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


def session20_tile(M, N, K, accumulate, bf16_out):
    """The launcher's tile as session 20 left it: the copier, or ping-pong where 256
    columns leave over an eighth of the last column of tiles empty."""
    tile = tuning.default_tile(M, N, K, accumulate, True, bf16_out, persistent=True)
    if tile in (tuning.NARROW_COPIER_TILE, tuning.PINGPONG_TILE):
        return tuning.PINGPONG_TILE
    return tile


def launch(out, da, db, ta, tb, accumulate, tile, stream=0):
    split = None
    if isinstance(tile, tuple) and not isinstance(tile, PersistentTile):
        tile, split = tile
        if split > 1 and not accumulate:    # a written out: zeroed, the splits added into it
            fill_zero(out, stream)
            accumulate = True
    M, N = out.shape
    K = da.shape[0] if ta else da.shape[1]
    if tile == "wgmma":
        tile = tuning.default_tile(M, N, K, accumulate, True, out.dtype == np.uint16)
    elif tile == "s20":
        tile = session20_tile(M, N, K, accumulate, out.dtype == np.uint16)
    gemm_bf16.matmul_bf16(out, da, db, ta, tb, accumulate, tile=tile, split_k=split,
                          stream=stream)


def as_float(out):
    import torch
    t = torch.as_tensor(out.view(np.int16) if out.dtype == np.uint16 else out, device="cuda")
    return t.view(torch.bfloat16).float() if out.dtype == np.uint16 else t


N384 = ("QKV dX", "MLP up dX", "MLP down forward", "LM head dX", "LM head dW")


def products(names):
    chosen = os.environ.get("PRODUCTS")
    chosen = chosen and chosen.split(",")
    for config in names:
        B, T, C, V = CONFIGS[config]
        for name, M, N, K, ta, tb, epilogue in step_products(B, T, C, V):
            if chosen and name not in chosen and not (
                    "N384" in chosen and name in N384 and (C == 384 or name == "LM head dW")):
                continue
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
    shown = variants_for(0)
    print("| config | product | M x N x K | out | " + " | ".join(
        f"{v} ms" for v in shown) + " | cuBLAS ms | cuBLAS TFLOP/s | " + " | ".join(
        f"{v}/cuBLAS" for v in shown) + " |", flush=True)
    print("|---|---|---|---|" + "---:|" * (2 * len(shown) + 2), flush=True)
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
            f"{ms[v]:.4f}" if v in ms else "-" for v in shown)
            + f" | {torch_ms:.4f} | {flops / torch_ms / 1e9:.0f} | " + " | ".join(
            f"{torch_ms / ms[v]:.3f}" if v in ms else "-" for v in shown) + " |",
            flush=True)
    for config in names:
        for v in shown:
            ratios = [t / ms[v] for c, _, ms, t in rows if c == config and v in ms]
            best = [t / min(ms.values()) for c, _, ms, t in rows if c == config and ms]
            if ratios:
                print(f"{config} {v}: geomean {math.exp(np.mean(np.log(ratios))):.3f} "
                      f"lowest {min(ratios):.3f} over {len(ratios)}", flush=True)
        if best:
            print(f"{config} best variant a product: geomean "
                  f"{math.exp(np.mean(np.log(best))):.3f} lowest {min(best):.3f}", flush=True)


GELU_VARIANTS = {"unfused": None, "fused": "default", "fused_copier": tuning.COPIER_TILE,
                 "fused_pingpong": tuning.PINGPONG_TILE, "fused_wgmma": tuning.WIDE_TILE}


def gelu_forward(names):
    """The MLP up forward (pre = x @ w, out = gelu(pre)) each way, checked and captured."""
    import torch
    from microgpt.kernels import elementwise
    ops = CudaBackend()
    rng = np.random.default_rng(0)
    print("| config | M x N x K | " + " | ".join(f"{v} ms" for v in GELU_VARIANTS)
          + " | cuBLAS mm ms | mm + gelu (torch eager) ms |", flush=True)
    print("|---|---|" + "---:|" * (len(GELU_VARIANTS) + 2), flush=True)
    for config in names:
        B, T, C, V = CONFIGS[config]
        M, N, K = B * T, 4 * C, C
        da, db, pre, lhs, rhs = operands(M, N, K, False, False, "bf16", rng)
        out = cuda.device_array((M, N), np.uint16)

        def run(tile, stream=0):
            if tile is None:
                gemm_bf16.matmul_bf16(pre, da, db, stream=stream)
                elementwise.gelu_forward(out, pre, stream=stream)
            else:
                gemm_bf16.matmul_bf16(out, da, db, gelu="forward", pre=pre, stream=stream,
                                      tile=None if tile == "default" else tile)
        ref = torch.mm(lhs.float(), rhs.float())
        ms = {}
        for v, tile in GELU_VARIANTS.items():
            try:
                device_memset(out, 0xFF, out.nbytes)
                device_memset(pre, 0xFF, pre.nbytes)
                run(tile)
                cuda.synchronize()
                stored = as_float(pre)
                err_pre = float(torch.linalg.norm(stored - ref) / torch.linalg.norm(ref))
                want = torch.nn.functional.gelu(stored, approximate="tanh")
                err_out = float(torch.linalg.norm(as_float(out) - want)
                                / torch.linalg.norm(want))
                print(f"  {config} {v}: rel err pre {err_pre:.2e} out {err_out:.2e}",
                      flush=True)
                ms[v] = captured_time(lambda stream: run(tile, stream), REPS, ops)
            except Exception as e:
                print(f"  {config} {v}: {type(e).__name__}: {str(e).splitlines()[0][:160]}",
                      flush=True)
        mm_ms = torch_time(lambda: torch.mm(lhs, rhs), max(REPS, 10))
        both_ms = torch_time(lambda: torch.nn.functional.gelu(torch.mm(lhs, rhs),
                                                              approximate="tanh"),
                             max(REPS, 10))
        print(f"| {config} | {M} x {N} x {K} | " + " | ".join(
            f"{ms[v]:.4f}" if v in ms else "-" for v in GELU_VARIANTS)
            + f" | {mm_ms:.4f} | {both_ms:.4f} |", flush=True)


GELU_BACKWARD_VARIANTS = {"unfused": None, "fused": "default", "fused_wgmma": tuning.WIDE_TILE}


def gelu_backward(names):
    """The MLP down dX with its GELU (dpre = (dout @ w^T) * gelu'(pre)) each way, captured;
    the fused ways' outs against the wgmma kernel's fused one (the same arithmetic: gelu'
    rounded to bf16, times the product) and against the unfused way's."""
    import torch
    from microgpt.kernels import elementwise
    ops = CudaBackend()
    rng = np.random.default_rng(0)
    print("| config | M x N x K | " + " | ".join(f"{v} ms" for v in GELU_BACKWARD_VARIANTS)
          + " |", flush=True)
    print("|---|---|" + "---:|" * len(GELU_BACKWARD_VARIANTS), flush=True)
    for config in names:
        B, T, C, V = CONFIGS[config]
        M, N, K = B * T, 4 * C, C
        ddout, dw, dpre, _, _ = operands(M, N, K, False, True, "bf16", rng)
        gen = torch.Generator(device="cuda").manual_seed(1)
        pre_t = torch.randn((M, N), device="cuda", generator=gen).bfloat16()
        pre = cuda.as_cuda_array(pre_t.view(torch.int16)).view(np.uint16)

        def run(tile, stream=0):
            if tile is None:
                gemm_bf16.matmul_bf16(dpre, ddout, dw, transpose_b=True, stream=stream)
                elementwise.gelu_backward(dpre, dpre, pre, stream=stream)
            else:
                gemm_bf16.matmul_bf16(dpre, ddout, dw, transpose_b=True, gelu="backward",
                                      pre=pre, stream=stream,
                                      tile=None if tile == "default" else tile)
        outs, ms = {}, {}
        for v, tile in GELU_BACKWARD_VARIANTS.items():
            try:
                device_memset(dpre, 0xFF, dpre.nbytes)
                run(tile)
                cuda.synchronize()
                outs[v] = as_float(dpre).clone()
                ms[v] = captured_time(lambda stream: run(tile, stream), REPS, ops)
            except Exception as e:
                print(f"  {config} {v}: {type(e).__name__}: {str(e).splitlines()[0][:160]}",
                      flush=True)
        for v in ("fused", "unfused"):
            if v in outs and "fused_wgmma" in outs:
                ref = outs["fused_wgmma"]
                print(f"  {config} {v} against fused_wgmma: rel diff "
                      f"{float(torch.linalg.norm(outs[v] - ref) / torch.linalg.norm(ref)):.2e}",
                      flush=True)
        print(f"| {config} | {M} x {N} x {K} | " + " | ".join(
            f"{ms[v]:.4f}" if v in ms else "-" for v in GELU_BACKWARD_VARIANTS) + " |",
            flush=True)


# the sweeps of session 22's call B: (configs, products, variants)
DW = "QKV dW,MLP up dW,MLP down dW"
SWEEPS = {
    # the weight gradients' splits: how many, and on which tile (waves of items a split)
    "dw": (["andrea-120m", "andrea-12m"], DW,
           "default,c192_s4,c192_s5,c192_s6,c192_s7,c192_s8,copier_s6,copier_s8,pp_s8"),
    # (call B's "fold", one split folded by the narrow copier against the splits added
    # into out, went with the fold: callB/sweeps.log)
    # andrea-120m's float32 outs of N 768 (K 3072 and 2304, 768): the tiles and a split
    "n768": (["andrea-120m"], "MLP up dX,MLP down forward,QKV dX,W_O forward",
             "default,pingpong,copier192,pp_s2,c192_s2"),
}


def sweep(names, run):
    for name in names:
        configs, chosen, variants = SWEEPS[name]
        os.environ["PRODUCTS"], os.environ["VARIANTS"] = chosen, variants
        print(f"## sweep {name}: {chosen}; {variants}", flush=True)
        run(configs)


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
    elif mode == "gelu":
        gelu_forward(rest or list(CONFIGS))
    elif mode == "gelu_backward":
        gelu_backward(rest or list(CONFIGS))
    elif mode == "sweep":
        sweep(rest, timed)
    elif mode == "check_sweep":
        sweep(rest, check)
    elif mode == "ncu":
        profile(rest[0], rest[1], rest[2:])
    else:
        raise SystemExit(f"mode {mode!r}: check, time, gelu, gelu_backward, sweep, "
                         "check_sweep or ncu")
