"""The kernels this session changed, launched under compute-sanitizer (memcheck; racecheck
for the shared-memory ones) at the step's shapes and at edges, each result held to the
float64 reference with the tests' tolerances (tests/helpers.py), so that a run that
sanitizes clean but computes wrong fails too.

    compute-sanitizer --tool memcheck --error-exitcode 1 python3 sanitize.py
"""
import sys
from pathlib import Path

import numpy as np
from numba import cuda

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tests"))
from helpers import (TOL_BF16_OUT, TOL_F32_OP, bf16, from_bf16, poisoned,  # noqa: E402
                     rel_error)
from microgpt import reference as ref                                      # noqa: E402
from microgpt.kernels import crossentropy                                  # noqa: E402


def check_crossentropy(N, V, block, seed):
    """The staged forward + backward on bf16 logits (N, V) with this block (None: the
    launcher's default) -> whether losses and dlogits are within tolerance."""
    rng = np.random.default_rng(seed)
    bits, exact = bf16(3.0 * rng.standard_normal((N, V), dtype=np.float32))
    targets = rng.integers(0, V, N).astype(np.int32)
    logits, losses = cuda.to_device(bits), cuda.to_device(poisoned(N))
    crossentropy.crossentropy_forward_backward(losses, logits, cuda.to_device(targets),
                                               1.0 / N, block=block)
    want_losses, want_grad = ref.crossentropy_forward_backward(exact, targets, 1.0 / N)
    loss_err = rel_error(losses.copy_to_host(), want_losses)
    grad_err = rel_error(from_bf16(logits.copy_to_host()), want_grad)
    ok = loss_err < TOL_F32_OP and grad_err < TOL_BF16_OUT
    print(f"crossentropy_forward_backward {N} x {V} bf16, block {block}: losses "
          f"{loss_err:.1e}, dlogits {grad_err:.1e}: {'ok' if ok else 'WRONG'}", flush=True)
    return ok


def main():
    # andrea-12m's rows (the default a warp a row), the explicit extremes, a row that
    # is not a whole number of a thread's chunks, andrea-120m's rows, a row of one chunk
    cases = [(64, 4096, None), (64, 4096, 32), (64, 4096, 512), (7, 4104, None),
             (5, 50304, None), (3, 8, None)]
    results = [check_crossentropy(N, V, block, seed)
               for seed, (N, V, block) in enumerate(cases)]
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
