"""Every kernel compiles for the H200 (compute capability 9.0), on a machine without a GPU.

The convention: each module of microgpt.kernels that defines kernels lists them as
``PTX_SIGNATURES = [(kernel, (argument types...)), ...]``, every launched configuration
that differs in code (kernels made by a factory: one entry per representative set of
compile-time constants). ``common`` holds device helpers only; they are compiled inside
the kernels that call them.

conftest turns the simulator on for the test process, so the compile runs in a subprocess
without NUMBA_ENABLE_CUDASIM: this file run as a script. There the warp shuffles and
every other GPU-only path are type-checked and lowered to PTX by NVVM from the
numba-cuda[cu13] wheels; the PTX is also checked for what a kernel of this engine should
never need: local memory (a register array that did not stay in registers) and float64
arithmetic (a Python float that slipped into float32 math).
"""
import importlib
import json
import os
import pkgutil
import re
import subprocess
import sys
import types

import pytest

HELPER_MODULES = {"common"}
CC = (9, 0)


def compile_all():
    """Compile every listed kernel; returns one record per module and per kernel."""
    from numba import cuda
    from numba.cuda import dispatcher

    import microgpt.kernels

    # A device function called by a kernel is compiled for the current device's compute
    # capability, and without a GPU there is none: name the target explicitly.
    dispatcher.get_current_device = lambda: types.SimpleNamespace(compute_capability=CC)

    records = []
    for info in pkgutil.iter_modules(microgpt.kernels.__path__):
        if info.name in HELPER_MODULES:
            continue
        module = importlib.import_module(f"microgpt.kernels.{info.name}")
        listed = getattr(module, "PTX_SIGNATURES", None)
        listed_ids = {id(kernel) for kernel, _ in listed or []}
        unlisted = [name for name, obj in vars(module).items()
                    if isinstance(obj, dispatcher.CUDADispatcher)
                    and not obj.targetoptions.get("device") and id(obj) not in listed_ids]
        records.append({"module": info.name, "has_list": listed is not None,
                        "unlisted": unlisted})
        for kernel, signature in listed or []:
            record = {"module": info.name, "kernel": kernel.py_func.__name__,
                      "signature": str(signature)}
            try:
                ptx, _ = cuda.compile_ptx(kernel.py_func, signature, cc=CC)
            except Exception as error:     # reported by the test, one line per kernel
                record["error"] = f"{type(error).__name__}: {error}"
            else:
                record["local_memory"] = ".local" in ptx
                record["float64"] = re.search(r"\.f64\b", ptx) is not None
            records.append(record)
    return records


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    path = tmp_path_factory.mktemp("ptx") / "records.json"
    env = {name: value for name, value in os.environ.items()
           if name != "NUMBA_ENABLE_CUDASIM"}
    done = subprocess.run([sys.executable, __file__, str(path)], env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(path.read_text())


def test_every_kernel_module_lists_its_kernels(records):
    modules = [r for r in records if "has_list" in r]
    assert {"gemm", "heads", "attention"} <= {r["module"] for r in modules}
    assert [r["module"] for r in modules if not r["has_list"]] == []
    assert [(r["module"], r["unlisted"]) for r in modules if r["unlisted"]] == []


def test_every_kernel_compiles_for_sm90(records):
    kernels = [r for r in records if "kernel" in r]
    failed = [f"{r['module']}.{r['kernel']}{r['signature']}: {r['error']}"
              for r in kernels if "error" in r]
    assert failed == []
    for module in {r["module"] for r in records}:
        assert any(r["module"] == module for r in kernels), f"{module} lists no kernel"


def test_kernels_use_registers_and_float32_only(records):
    for r in records:
        if "kernel" in r and "error" not in r:
            assert not r["local_memory"], f"{r['module']}.{r['kernel']} uses local memory"
            assert not r["float64"], f"{r['module']}.{r['kernel']} computes in float64"


if __name__ == "__main__":
    with open(sys.argv[1], "w") as out:
        json.dump(compile_all(), out)
