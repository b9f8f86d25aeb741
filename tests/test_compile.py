"""Every kernel compiles for the H200 (compute capability 9.0a), on a machine without a GPU.

The convention: each module of microgpt.kernels (the op families' packages' modules
included) that defines kernels lists them as
``PTX_SIGNATURES = [(kernel, (argument types...)), ...]``, every launched configuration
that differs in code (kernels made by a factory: one entry per representative set of
compile-time constants). The layers below the op families (device, common, atoms,
precision, layouts) hold device helpers only; they are compiled inside the kernels that
call them.

conftest turns the simulator on for the test process, so the compile runs in subprocesses
without NUMBA_ENABLE_CUDASIM: this file run as a script, one process per CPU that the
test's pytest worker has to itself, two at least (~10 CPU-minutes on the CPU machine for
the 169 kernels, more on CI's), each compiling its share of the kernels. There the warp
shuffles and every other GPU-only path are type-checked and lowered to PTX by NVVM from
the numba-cuda[cu13] wheels; the PTX is also checked for what a kernel of this engine
should never need: local memory (a register array that did not stay in registers) and
float64 arithmetic (a Python float that slipped into float32 math). Then nvJitLink (from
the same wheels) assembles the PTX into sm_90a machine code, as the driver would on the
H200: that checks the inline-asm PTX of the tensor-core atoms, which NVVM passes through
unread, and reports spills (a stack frame) that the PTX cannot show. A kernel that the
driver's JIT loads whole-program (kernel.whole_program: the persistent GEMM's copier
tiles, whose setmaxnreg a relocatable link ignores) is assembled by the CUDA toolkit's
ptxas instead, whole, as that JIT compiles it; the check needs ptxas on PATH.
"""
import importlib
import json
import os
import pkgutil
import re
import shutil
import subprocess
import sys
import tempfile
import types

import pytest

# the atoms' simulator twins, which the GPU never compiles (atoms.gpu is what it runs)
TWINS = {"atoms.simulator"}
# (module, kernel, head_dim or None): stack bytes measured when the spill check came in.
# The float32 dq kernel holds a query row and its gradient (2 D floats) per thread: at
# D = 72 that no longer fits beside the rest. It is the float32 fallback for such a head
# size; pinned so that it cannot grow, or spread, unnoticed.
KNOWN_SPILLS = {("attention.fp32", "attention_backward_dq_kernel", 72): 40}
# numba-cuda compiles for a device of compute capability 9.0 or more with the
# architecture-specific target (sm_90a on the H200), which wgmma needs: so does this check
CC = (9, 0, "a")


def assemble(ptx, whole=False):
    """(error or None, stack frame bytes, whether ptxas serialized the wgmma instructions):
    the PTX assembled for sm_90a by nvJitLink, or (whole: a kernel the driver's JIT loads,
    kernel.whole_program) compiled whole by ptxas, as that JIT does: nvJitLink assembles
    relocatable code, which ignores setmaxnreg."""
    if whole:
        return assemble_whole(ptx)
    from cuda.bindings import nvjitlink

    handle = nvjitlink.create(2, ["-arch=sm_90a", "-verbose"])
    try:
        data = ptx.encode()
        nvjitlink.add_data(handle, nvjitlink.InputType.PTX, data, len(data), "kernel.ptx")
        try:
            nvjitlink.complete(handle)
        except nvjitlink.nvJitLinkError:
            log = bytearray(nvjitlink.get_error_log_size(handle))
            nvjitlink.get_error_log(handle, log)
            return log.decode(errors="replace")[-2000:], None, None
        log = bytearray(nvjitlink.get_info_log_size(handle))
        nvjitlink.get_info_log(handle, log)
        return _report(log.decode(errors="replace"))
    finally:
        nvjitlink.destroy(handle)


def _report(log):
    stack = re.search(r"(\d+) bytes stack", log)
    # e.g. a call in the kernel, or an accumulator touched while a wgmma is in flight:
    # each wgmma then waits for the one before, a silent loss of most of its speed
    serialized = "wgmma.mma_async instructions are serialized" in log
    return None, int(stack.group(1)) if stack else None, serialized


def assemble_whole(ptx):
    """assemble's whole-program compile: the CUDA toolkit's ptxas (on PATH), the PTX's
    version line its own (NVVM may write a newer ISA than it reads, as than a driver)."""
    ptxas = shutil.which("ptxas")
    if ptxas is None:
        return "a whole-program kernel's check needs the CUDA toolkit's ptxas on PATH", None, None
    release = re.search(r"release (\d+)\.(\d+)", subprocess.run(
        [ptxas, "--version"], capture_output=True, text=True).stdout)
    ptx = re.sub(r"^\.version \d+\.\d+", f".version {int(release[1]) - 4}.{release[2]}",
                 ptx, count=1, flags=re.M)
    with tempfile.TemporaryDirectory() as folder:
        source = os.path.join(folder, "kernel.ptx")
        with open(source, "w") as f:
            f.write(ptx)
        done = subprocess.run([ptxas, "-arch=sm_90a", "-v", source, "-o",
                               os.path.join(folder, "kernel.cubin")],
                              capture_output=True, text=True)
    if done.returncode:
        return done.stderr[-2000:], None, None
    return _report(done.stderr + done.stdout)


def compile_all(part=0, parts=1):
    """Compile every parts-th listed kernel, from the part-th on; returns one record per
    kernel compiled, and (part 0) one per module."""
    from numba import cuda
    from numba.cuda import dispatcher

    import microgpt.kernels

    # A device function called by a kernel is compiled for the current device's compute
    # capability, and without a GPU there is none: name the target explicitly.
    dispatcher.get_current_device = lambda: types.SimpleNamespace(compute_capability=CC)

    records, listed_so_far = [], 0
    prefix = "microgpt.kernels."
    names = sorted(info.name[len(prefix):]
                   for info in pkgutil.walk_packages(microgpt.kernels.__path__, prefix))
    for name in names:
        if name in TWINS:
            continue
        module = importlib.import_module(f"microgpt.kernels.{name}")
        listed = getattr(module, "PTX_SIGNATURES", None)
        listed_ids = {id(kernel) for kernel, _ in listed or []}
        unlisted = [name for name, obj in vars(module).items()
                    if isinstance(obj, dispatcher.CUDADispatcher)
                    and not obj.targetoptions.get("device") and id(obj) not in listed_ids]
        if part == 0:
            records.append({"module": name, "has_list": listed is not None,
                            "unlisted": unlisted, "listed": len(listed or [])})
        for index, (kernel, signature) in enumerate(listed or [], listed_so_far):
            if index % parts != part:
                continue
            closure = dict(zip(kernel.py_func.__code__.co_freevars,
                               (c.cell_contents for c in kernel.py_func.__closure__ or ())))
            allowed = getattr(module, "FLOAT_ATOMICS", ())
            record = {"module": name, "kernel": kernel.py_func.__name__,
                      "signature": str(signature), "head_dim": closure.get("D"),
                      # (a kernel whose body does not name it says it as an attribute)
                      "epilogue": closure.get("epilogue", getattr(kernel, "epilogue", None)),
                      # a kernel its module names (or lists) as taking float atomics on
                      # purpose
                      "atomics_allowed": (kernel.py_func.__name__ in allowed
                                          or any(kernel is k for k in allowed))}
            try:
                # the launch bounds (a register cap) are the dispatcher's, not the function's
                ptx, _ = cuda.compile_ptx(kernel.py_func, signature, cc=CC, launch_bounds=(
                    kernel.targetoptions.get("launch_bounds")))
            except Exception as error:     # reported by the test, one line per kernel
                record["error"] = f"{type(error).__name__}: {error}"
            else:
                record["local_memory"] = ".local" in ptx
                record["float64"] = re.search(r"\.f64\b", ptx) is not None
                # float atomics only: an integer's adds are exact in any order
                record["float_atomics"] = re.search(
                    r"\b(atom|red)(\.\w+)*\.(f16|bf16|f32|f64)\b", ptx) is not None
                # the bulk tensor adds, and the ordered split-K's turns around them (an
                # integer exchange passes a turn, after a wait for the adds' writes)
                record["bulk_adds"] = "cp.reduce.async.bulk" in ptx
                record["turns"] = (re.search(r"\batom\.global\.exch\.b32\b", ptx) is not None
                                   and re.search(r"cp\.async\.bulk\.wait_group 0;", ptx)
                                   is not None)
                (record["assembly_error"], record["stack_bytes"],
                 record["wgmma_serialized"]) = assemble(
                    ptx, getattr(kernel, "whole_program", False))
            records.append(record)
        listed_so_far += len(listed or [])
    return records


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    """Every record of compile_all, from one subprocess per CPU that this pytest has to
    itself (two at least, at most 4: each holds numba and NVVM, some hundreds of MB;
    pytest-xdist's workers share the CPUs out), each compiling its share of the kernels."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", 1))
    # two at least: under CI's two workers one process took ~13 minutes beside the other
    # worker's files, the suite's longest pole; two halves share the CPUs with them instead
    parts = max(2, min((os.cpu_count() or 1) // workers, 4))
    folder = tmp_path_factory.mktemp("ptx")
    paths = [folder / f"records-{part}.json" for part in range(parts)]
    env = {name: value for name, value in os.environ.items()
           if name != "NUMBA_ENABLE_CUDASIM"}
    running = [subprocess.Popen([sys.executable, __file__, str(path), str(part), str(parts)],
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True) for part, path in enumerate(paths)]
    try:
        for done in running:
            # a hang's limit, not a budget: CI's one process ran past 10 minutes
            _, stderr = done.communicate(timeout=1500)
            assert done.returncode == 0, stderr[-3000:]
    finally:
        for done in running:
            done.kill()
            done.wait()
    return [record for path in paths for record in json.loads(path.read_text())]


def test_every_kernel_module_lists_its_kernels(records):
    modules = [r for r in records if "has_list" in r]
    assert {"gemm.fp32", "gemm.mma_sync", "gemm.wgmma", "attention.heads",
            "attention.fp32", "attention.flash"} <= {r["module"] for r in modules if r["has_list"]}
    assert [(r["module"], r["unlisted"]) for r in modules if r["unlisted"]] == []


def test_every_kernel_compiles_for_sm90(records):
    kernels = [r for r in records if "kernel" in r]
    # each listed kernel compiled once, by one of the processes
    assert len(kernels) == sum(r["listed"] for r in records if "listed" in r)
    failed = [f"{r['module']}.{r['kernel']}{r['signature']}: {r['error']}"
              for r in kernels if "error" in r]
    assert failed == []
    for module in {r["module"] for r in records if r.get("has_list")}:
        assert any(r["module"] == module for r in kernels), f"{module} lists no kernel"


def test_every_kernel_assembles_for_sm90a_without_spills(records):
    kernels = [r for r in records if "kernel" in r and "error" not in r]
    failed = [f"{r['module']}.{r['kernel']}: {r['assembly_error']}"
              for r in kernels if r["assembly_error"]]
    assert failed == []
    spilled = {(r["module"], r["kernel"], r["head_dim"]): r["stack_bytes"]
               for r in kernels if r["stack_bytes"] != 0}
    assert spilled == KNOWN_SPILLS
    assert [r["kernel"] for r in kernels if r["wgmma_serialized"]] == []


def test_kernels_use_registers_and_float32_only(records):
    for r in records:
        if "kernel" in r and "error" not in r:
            assert not r["local_memory"], f"{r['module']}.{r['kernel']} uses local memory"
            assert not r["float64"], f"{r['module']}.{r['kernel']} computes in float64"


# the kernels between a data-parallel step's gradient average and its update: the gradient
# norm and AdamW. Every rank runs them on the same bits, and must get the same bits back,
# or the ranks' parameters drift apart (docs/gpu.md); atomics add in the order the blocks
# happen to finish, and a float sum's rounding follows that order (an integer sum is
# exact). And the gradient's own kernels,
# the embedding's and the LayerNorm weights', which give a run the same bits every time
# (issue 31: two runs of one seed and data ended at 3.2523 and 3.2354): the embedding's
# default scatter alone takes float atomics (FLOAT_ATOMICS; --deterministic sums in the
# batch's order sorted on the host instead).
# The mma.sync GEMM: its split-K's atomic epilogue alone (the deterministic backend's
# splits take the ordered one, tests/test_kernels_gemm_bf16.py); and the ordered split-K by
# parts' adding (gemm.turns.add_parts), which reduces the splits in their order
SAME_BITS_EVERY_TIME = {"reductions", "adamw", "embedding", "layernorm", "gemm.mma_sync",
                        "gemm.turns"}


def test_the_update_kernels_use_no_float_atomics(records):
    kernels = [r for r in records if r.get("module") in SAME_BITS_EVERY_TIME and "kernel" in r]
    assert {r["module"] for r in kernels} == SAME_BITS_EVERY_TIME
    assert [f"{r['module']}.{r['kernel']}" for r in kernels
            if "error" not in r and r["float_atomics"] != r["atomics_allowed"]] == []


@pytest.mark.parametrize("module", ["gemm.wgmma", "gemm.persistent"])
def test_the_split_k_adds_in_turn_when_ordered(records, module):
    """The wgmma GEMMs add into out by bulk tensor adds, whose PTX does not say in what
    order they come: their ordered epilogue's kernels (the deterministic backend's split-K)
    take turns around them, their atomic epilogue's do not, and no kernel of theirs takes
    a float atomic instruction."""
    kernels = [r for r in records if r.get("module") == module and "kernel" in r]
    turns = {(r["epilogue"], r["bulk_adds"], r["turns"], r["float_atomics"])
             for r in kernels if r["epilogue"] in ("ordered", "atomic")}
    assert turns == {("ordered", True, True, False), ("atomic", True, False, False)}


if __name__ == "__main__":
    with open(sys.argv[1], "w") as out:
        json.dump(compile_all(int(sys.argv[2]), int(sys.argv[3])), out)
