"""Each step product's work on the launcher's tile (no GPU: tuning's choices at the H200's
132 SMs): the tile, the split of K, the items (a tile and a split each) and the waves of
them one an SM, the last wave's fill, the slabs of K an item and its epilogue's bytes.
The columns that say what limits a product: a last wave part-empty (wave quantization),
few slabs an item beside its epilogue (a short K's fill and drain), splits' adds.

python3 waves.py [CONFIG...]
"""
import sys

from microgpt.gemms import step_products
from microgpt.kernels.common import ceil_div
from microgpt.kernels.gemm import tuning

SMS = 132
CONFIGS = {"andrea-120m": (16, 1024, 768, 50304), "andrea-12m": (64, 256, 384, 4096)}


def rows(config):
    B, T, C, V = CONFIGS[config]
    for name, M, N, K, ta, tb, epilogue in step_products(B, T, C, V):
        accumulate = epilogue == "accumulate"
        bf16_out = epilogue not in ("accumulate", "float32")
        tile = tuning.default_tile(M, N, K, accumulate, True, bf16_out, persistent=True)
        written_split = tuning.splits_written(K, accumulate, bf16_out, tile)
        split = (tuning.default_split_k(M, N, K, tile) if accumulate or written_split else 1)
        steps = ceil_div(ceil_div(K, tile.depth), split)
        split = ceil_div(ceil_div(K, tile.depth), steps)
        items = ceil_div(M, tile.rows) * ceil_div(N, tile.cols) * split
        waves = items / SMS
        fill = items / (ceil_div(items, SMS) * SMS)
        out_bytes = tile.rows * tile.cols * (2 if bf16_out else 4)
        yield (config, name, f"{M} x {N} x {K}", f"{tile.rows} x {tile.cols}"
               + (" ping-pong" if tile.pingpong else ""), split, items, f"{waves:.2f}",
               f"{fill:.0%}", steps, f"{out_bytes // 1024} KiB")


if __name__ == "__main__":
    print("| config | product | M x N x K | tile | splits | items | waves | filled | slabs an item | epilogue out |")
    print("|---|---|---|---|---:|---:|---:|---:|---:|---:|")
    for config in sys.argv[1:] or list(CONFIGS):
        for row in rows(config):
            print("| " + " | ".join(map(str, row)) + " |")
