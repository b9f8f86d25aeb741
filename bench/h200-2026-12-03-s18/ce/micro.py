"""Session 18's memory-bound kernels at andrea-120m shapes beside the device's copy: the
cross-entropy forward + backward staged and read twice (staged=False, the kernel before
this session), by block size; each timed as tools/bench.py times (CUDA events around
`reps` launches) and captured (tools/benchmarks/timing.captured_time: 20 launches in a
graph, the best of the replays). GB/s: the bytes the op must read and write once."""
import sys

import numpy as np
from numba import cuda

sys.path.insert(0, "tools")
from benchmarks.timing import captured_time, cuda_time  # noqa: E402

from microgpt.cuda_backend import CudaBackend  # noqa: E402
from microgpt.kernels import crossentropy  # noqa: E402

N, V = 16384, 50304
REPS = 10


def row(name, ms, nbytes):
    print(f"| {name} | {ms:.4f} | {nbytes / ms / 1e6:.0f} |", flush=True)


def main(which):
    ops = CudaBackend()
    rng = np.random.default_rng(0)
    print("| op | ms | GB/s |\n|---|---:|---:|")
    if "copy" in which:
        src = cuda.to_device(np.resize(rng.standard_normal(1 << 20, dtype=np.float32),
                                       N * V // 2))          # 1.65 GB, a bf16 logits' size
        dst = cuda.device_array_like(src)
        row("device-to-device copy, 1.65 GB", cuda_time(lambda: dst.copy_to_device(src), REPS),
            2 * src.nbytes)
        del src, dst
    targets = cuda.to_device(rng.integers(0, V, N).astype(np.int32))
    losses = cuda.device_array(N, np.float32)
    for dtype, label in ((np.uint16, "bf16"), (np.float32, "float32")):
        if label not in which:
            continue
        block = rng.standard_normal((256, V), dtype=np.float32) * 2
        if dtype == np.uint16:
            import ml_dtypes
            block = block.astype(ml_dtypes.bfloat16).view(np.uint16)
        logits = cuda.to_device(np.resize(block, (N, V)))
        nbytes = 2 * logits.nbytes
        for staged, blocks in ((False, (512,)), (True, (256, 512, 1024))):
            for b in blocks:
                def fb(stream=0):
                    crossentropy.crossentropy_forward_backward(losses, logits, targets, 1.0 / N,
                                                               stream=stream, block=b,
                                                               staged=staged)
                name = f"crossentropy fwd+bwd {label}, staged {staged}, block {b}"
                row(name + " (events)", cuda_time(fb, REPS), nbytes)
                row(name + " (captured)", captured_time(fb, 5, ops), nbytes)
        del logits


if __name__ == "__main__":
    main(sys.argv[1:] or ["copy", "bf16", "float32"])
