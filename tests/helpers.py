"""Shared by the tests: relative error against a float64 reference, poisoning, random data,
bf16 arrays, the sm_90 compile of a test module's own kernels."""
import os
import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np

ON_GPU = os.environ.get("MICROGPT_TEST_DEVICE", "sim") == "gpu"
# On a GPU the tests draw the model's real shapes, unless MICROGPT_TEST_SHAPES=small asks for
# the simulator's: the sanitizer run (docs/design.md) wants those, the shapes that end
# tiles mid-way and trip bounds, at a cost a memory checker can afford.
REAL_SHAPES = ON_GPU and os.environ.get("MICROGPT_TEST_SHAPES", "real") != "small"

# ||out - ref|| / ||ref||, docs/design.md's tolerances
TOL_F32_OP = 1e-5
TOL_F32_MODEL = 1e-4
# a float32 result (TOL_F32_OP) rounded to bf16: half a unit in the last of its 8
# significant bits, at most 2^-8 relative per element, so at most 2^-8 in norm
TOL_BF16_OUT = 2.0**-8 + TOL_F32_OP

POISON = np.float32(np.nan)
BF16 = np.uint16        # how a bf16 array is held: its bit patterns


def rel_error(out, ref):
    """||out - ref|| / ||ref|| in float64; NaN (an unwritten, poisoned element) never passes."""
    out = np.asarray(out, np.float64)
    ref = np.asarray(ref, np.float64)
    assert out.shape == ref.shape, f"shape {out.shape} != reference {ref.shape}"
    if not np.all(np.isfinite(out)):
        return np.inf
    denom = np.linalg.norm(ref)
    return np.linalg.norm(out - ref) / (denom if denom > 0 else 1.0)


def assert_close(out, ref, tol, what=""):
    err = rel_error(out, ref)
    assert err < tol, f"{what}: relative error {err:.3e} >= {tol:.0e}"


def randn(rng, *shape, scale=1.0, dtype=np.float32):
    """Fresh normal draws, never zeros."""
    return (rng.standard_normal(shape) * scale).astype(dtype)


def poisoned(shape, dtype=np.float32):
    """NaN, or for a bf16 array (uint16) the bits of a bf16 NaN, or -1 for integers."""
    if np.dtype(dtype) == np.uint16:
        return np.full(shape, 0xFFFF, np.uint16)
    return np.full(shape, np.nan if np.dtype(dtype).kind == "f" else -1, dtype)


def bf16(x):
    """float32 -> (uint16 bits for the device, the same bf16 values in float64)."""
    rounded = x.astype(ml_dtypes.bfloat16)
    return rounded.view(np.uint16), rounded.astype(np.float64)


def from_bf16(bits):
    """uint16 bits of bf16 values (a device array's copy) -> float64."""
    return bits.view(ml_dtypes.bfloat16).astype(np.float64)


def assert_output_close(out, ref, what):
    """A kernel's output (a device array) against its float64 reference: TOL_F32_OP for
    float32, TOL_BF16_OUT for bf16 (the float32 result rounded)."""
    got = out.copy_to_host()
    if got.dtype == BF16:
        assert_close(from_bf16(got), ref, TOL_BF16_OUT, what + " (bf16)")
    else:
        assert_close(got, ref, TOL_F32_OP, what)


def assert_one_key_gradients(dq, dk, dout, q, k, v, what):
    """Attention over one key (T = 1): out = v whatever q and k are, so the exact dq and
    dk are 0 and a relative error is undefined. What float32 leaves is the rounding of
    dp - rowsum(dout * out) (dout . v summed two ways), which Cauchy-Schwarz bounds row by
    row by eps |dout| |v| |k| / sqrt(D) (|q| for dk). Arrays (..., T, D)."""
    row_scale = (np.linalg.norm(dout, axis=-1) * np.linalg.norm(v, axis=-1)
                 / np.sqrt(q.shape[-1]))
    for name, got, other in (("dq", dq, k), ("dk", dk, q)):
        bound = TOL_F32_OP * row_scale * np.linalg.norm(other, axis=-1)
        assert np.all(np.linalg.norm(got, axis=-1) <= bound), f"{what} {name}"


def assert_attention_gradients(got, want, dout, q, k, v, tol_v, tol_qk, what):
    """dq, dk, dv, delta (got) against the reference's (want): dv within tol_v, dq and dk
    within tol_qk, or at T = 1, where they are 0, within assert_one_key_gradients' bound;
    delta = rowsum(dout * out), a float32 sum of products that are exact (bf16 inputs) or
    float32 ones, within TOL_F32_OP."""
    (dq, dk, dv, delta), (want_dq, want_dk, want_dv, want_delta) = got, want
    assert_close(delta, want_delta, TOL_F32_OP, what + " delta")
    assert_close(dv, want_dv, tol_v, what + " dv")
    if q.shape[-2] > 1:
        assert_close(dq, want_dq, tol_qk, what + " dq")
        assert_close(dk, want_dk, tol_qk, what + " dk")
    else:
        assert_one_key_gradients(dq, dk, dout, q, k, v, what)


def to_device_off_group(host):
    """host on the device one element past an aligned address: a view into a longer
    array, which a launcher must not read in groups (a vector access must be aligned)."""
    from numba import cuda

    flat = np.concatenate([np.zeros(1, host.dtype), host.reshape(-1)])
    return cuda.to_device(flat)[1:].reshape(host.shape)


def record_launchers(monkeypatch, launchers, run):
    """Each (module, name) launcher replaced by one that appends its name to the list this
    returns and, where run, launches it: which kernel an op routes to, on any device."""
    calls = []
    for module, name in launchers:
        def record(*args, _launch=getattr(module, name), _name=name, **kwargs):
            calls.append(_name)
            if run:
                _launch(*args, **kwargs)
        monkeypatch.setattr(module, name, record)
    return calls


# A test module's kernels, lowered to PTX for the H200 in a process without the simulator:
# the simulator takes what the GPU's compiler refuses (a shared array sized by an
# expression, an atom factory called inside a kernel, where numba needs a constant or a
# function it can type), so this is the check CI can make of a GPU-only test kernel.
_COMPILE_FOR_SM90 = """
import sys, types
from numba import cuda, float32, int32, uint16, uint32, uint64
from numba.cuda import dispatcher
# a device function compiles for the current device, and there is none: name the target
dispatcher.get_current_device = lambda: types.SimpleNamespace(compute_capability=(9, 0))
sys.path.insert(0, sys.argv[1])
t = __import__(sys.argv[2])
"""


def compiles_for_sm90(module, calls):
    """Runs `calls` (cuda.compile_ptx lines; the test module is `t`) in a fresh process
    that imports tests/`module` with the simulator off; fails with its stderr."""
    env = {name: value for name, value in os.environ.items() if name != "NUMBA_ENABLE_CUDASIM"}
    done = subprocess.run([sys.executable, "-c", _COMPILE_FOR_SM90 + calls,
                           str(Path(__file__).parent), module],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
