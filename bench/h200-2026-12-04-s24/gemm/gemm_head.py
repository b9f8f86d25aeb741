"""The step's GEMMs beside cuBLAS as torch.compile's step runs them: call A's profiles put
microgpt's GEMMs (+ GELU) at andrea-120m ~1.1 ms a step behind torch.compile's cuBLAS
kernels (bench/h200-2026-12-04-s24/gemm/callA/), where tools/bench.py's product table had
them at 1.04x torch.mm. Two differences are timed here: torch.mm captured in a CUDA graph
(as the step replays it; the bench times it eagerly), and the LM head over the whole
batch's rows in one launch (torch's step) against the model's chunks of 8192
(model.head_rows). Each product: microgpt's launcher with its default routing and the
model's out dtype, and torch.mm (bf16 out), each 20 launches captured, the best of --reps
replays.

    python gemm_head.py --configs andrea-120m andrea-12m --reps 5
"""
import argparse
import sys
from pathlib import Path

import torch

sys.path[:0] = [str(Path(__file__).resolve().parents[3] / "tools")]
from benchmarks.gemm import GEMM_CONFIGS                          # noqa: E402
from benchmarks.gemm_operands import operands                     # noqa: E402
from benchmarks.timing import captured_time, torch_captured_time  # noqa: E402
from microgpt.cuda_backend import CudaBackend                     # noqa: E402
from microgpt.gemms import step_products                          # noqa: E402
from microgpt.kernels.common import fill_zero                     # noqa: E402
from microgpt.kernels.gemm import bf16 as gemm_bf16               # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--configs", nargs="+", default=["andrea-120m"])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--head-only", action="store_true")
    args = parser.parse_args()
    ops = CudaBackend()
    gen = torch.Generator(device="cuda").manual_seed(0)
    print("| config | product | M x N x K | out | microgpt ms | TFLOP/s | torch.mm captured ms "
          "| TFLOP/s | ratio |\n|---|---|---|---|--:|--:|--:|--:|--:|", flush=True)
    for config, B, T, C, V in GEMM_CONFIGS:
        if config not in args.configs:
            continue
        products = step_products(B, T, C, V)
        # the LM head over all B x T rows in one launch, as torch's step runs it
        rows = B * T
        products += [("LM head forward, all rows", rows, V, C, False, True, "bf16"),
                     ("LM head dX, all rows", rows, C, V, False, False, "float32"),
                     ("LM head dW, all rows", V, C, rows, True, False, "accumulate")]
        for name, M, N, K, ta, tb, epilogue in products:
            if args.head_only and "LM head" not in name:
                continue
            accumulate = epilogue == "accumulate"
            # (the GELU epilogues' products as plain bf16 ones: cuBLAS has no GELU here)
            da, db, out, lhs, rhs = operands(M, N, K, ta, tb, "bf16" if "gelu" in epilogue
                                             else epilogue, gen)
            fill_zero(out)
            ms = captured_time(lambda s: gemm_bf16.matmul_bf16(out, da, db, ta, tb, accumulate,
                                                               stream=s), args.reps, ops)
            torch_ms = torch_captured_time(lambda: torch.mm(lhs, rhs), args.reps)
            flops = 2 * M * N * K
            print(f"| {config} | {name} | {M} x {N} x {K} | {out.dtype} | {ms:.4f} | "
                  f"{flops / ms / 1e9:.0f} | {torch_ms:.4f} | {flops / torch_ms / 1e9:.0f} | "
                  f"{torch_ms / ms:.3f} |", flush=True)
            del da, db, out, lhs, rhs


if __name__ == "__main__":
    main()
