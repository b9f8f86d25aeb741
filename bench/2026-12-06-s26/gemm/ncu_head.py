"""The LM head's products at andrea-120m's 8192-row chunk, each launched twice with the
tiles named (head_sweep.py's labels), for ncu to profile (the second launch of each pair
warm):

    ncu --clock-control none -k regex:persistent --section SpeedOfLight \
        --section MemoryWorkloadAnalysis --section WarpStateStats \
        python ncu_head.py --tiles copier tall_copier --products dX
"""
import argparse
import sys
from pathlib import Path

import torch

sys.path[:0] = [str(Path(__file__).resolve().parent)]
import head_sweep as hs                                                   # noqa: E402
from microgpt.kernels.common import fill_zero                             # noqa: E402
from microgpt.kernels.gemm import bf16 as gemm_bf16                       # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tiles", nargs="+", default=["copier", "tall_copier"])
    parser.add_argument("--products", nargs="+", default=["forward", "dX", "dW"])
    args = parser.parse_args()
    gen = torch.Generator(device="cuda").manual_seed(0)
    rows, C, V = hs.HEADS["andrea-120m"]
    for name, M, N, K, ta, tb, out_kind in hs.head_products(8192, C, V):
        if name not in args.products:
            continue
        da, db, out, *_ = hs.operands(M, N, K, ta, tb, out_kind, gen)
        for label in args.tiles:
            written = out_kind == "float32"
            for _ in range(2):
                if written:               # (as the launcher's split of it: zeroed, added)
                    fill_zero(out)
                gemm_bf16.matmul_bf16(out, da, db, ta, tb, True if written else
                                      out_kind == "accumulate", tile=hs.TILES[label])
            torch.cuda.synchronize()
            print(f"{name} {M}x{N}x{K} {label}: launched twice", flush=True)


if __name__ == "__main__":
    main()
