"""The op set is declared once (microgpt.ops) and everything that lists ops agrees with it:
both backends, the compile check, the kernel tests and the bench rows. And the package's
import graph: no cycle, and the kernels do not load the model."""
import ast
import importlib
import inspect
import pathlib
import pkgutil
import subprocess
import sys

import pytest

from microgpt.backend import NumpyBackend
from microgpt.cuda_backend import CudaBackend
from microgpt.ops import MEMORY, OPS

ROOT = pathlib.Path(__file__).resolve().parents[1]
# launcher keywords that are the CUDA backend's alone: geometry and the stream
# how a launch runs, not what it computes (split_k and deterministic the backend sets)
LAUNCH_ONLY = {"stream", "block", "tile", "rows_per_block", "max_blocks", "split_k",
               "blocks_per_head", "fused", "chunk", "part_rows", "deterministic",
               "stage"}   # cross-entropy: whether a row is staged in shared memory


def public_methods(cls):
    return {name for name, _ in inspect.getmembers(cls, callable) if not name.startswith("_")}


def test_both_backends_expose_exactly_the_declared_ops():
    declared = set(OPS) | set(MEMORY)
    assert public_methods(NumpyBackend) == declared
    # and what only the GPU has: graphs, and bf16 kernels with their limits
    assert public_methods(CudaBackend) - {"capture", "bf16_fits"} == declared


@pytest.mark.parametrize("op", sorted(OPS))
def test_the_ops_take_the_same_arguments_on_both_backends(op):
    """The reference method and the kernel launcher: the same parameters in the same order,
    but for the launcher's geometry and stream."""
    numpy_params = list(inspect.signature(getattr(NumpyBackend, op)).parameters)[1:]
    launcher = getattr(importlib.import_module(f"microgpt.kernels.{OPS[op]}"), op)
    cuda_params = [p for p in inspect.signature(launcher).parameters if p not in LAUNCH_ONLY]
    assert numpy_params == cuda_params


def test_every_kernel_module_of_the_op_set_is_compile_checked():
    """The op's module lists its kernels, or, for an op family's package (a router), its
    modules do."""
    for name in set(OPS.values()):
        module = importlib.import_module(f"microgpt.kernels.{name}")
        modules = [module] + [importlib.import_module(f"{module.__name__}.{info.name}")
                              for info in pkgutil.iter_modules(getattr(module, "__path__", []))]
        assert any(getattr(m, "PTX_SIGNATURES", None) for m in modules), name


@pytest.mark.parametrize("op", sorted(OPS))
def test_every_op_has_a_kernel_test(op):
    """The launcher is called in tests/test_kernels_<module>.py (the AdamW and reduction
    modules in test_kernels_optim.py, the heads' in test_kernels_attention.py)."""
    module = OPS[op].rsplit(".", 1)[-1]
    name = {"adamw": "optim", "reductions": "optim", "heads": "attention"}.get(module, module)
    source = (ROOT / "tests" / f"test_kernels_{name}.py").read_text()
    assert f"{module}.{op}(" in source


def test_every_op_has_a_bench_row():
    """tools/bench.py times each op of an andrea-120m step: ops.<name>(...) in its kernels
    section (tools/benchmarks/kernels.py)."""
    tree = ast.parse((ROOT / "tools" / "benchmarks" / "kernels.py").read_text())
    bench = next(f for f in ast.walk(tree)
                 if isinstance(f, ast.FunctionDef) and f.name == "bench_kernels")
    called = {node.func.attr for node in ast.walk(bench)
              if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and isinstance(node.func.value, ast.Name) and node.func.value.id == "ops"}
    assert set(OPS) - called == set()


def module_imports(path, name, package):
    """Modules of `package` that the file of module `name` imports (at any depth of the
    file; relative imports resolved: ``from ..atoms import x`` in kernels/gemm/wgmma.py is
    microgpt.kernels.atoms and microgpt.kernels.atoms.x)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            module = node.module
            if node.level:
                here = name if path.stem == "__init__" else name.rsplit(".", 1)[0]
                base = here.rsplit(".", node.level - 1)[0] if node.level > 1 else here
                module = f"{base}.{node.module}" if node.module else base
            if module.startswith(package):
                if node.module:      # (from . import x: the module x, not the package)
                    names.add(module)
                names.update(f"{module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            names.update(a.name for a in node.names if a.name.startswith(package))
    return names


def kernel_modules():
    """{module name: file} of every module of microgpt.kernels, packages included."""
    files = {}
    for path in (ROOT / "kernels").rglob("*.py"):
        parts = path.relative_to(ROOT / "kernels").with_suffix("").parts
        parts = parts[:-1] if parts[-1] == "__init__" else parts
        files[".".join(("microgpt", "kernels") + parts)] = path
    return files


def test_the_package_has_no_import_cycle():
    """Every import inside microgpt/ (lazy ones in functions included) as a graph over its
    modules: no cycle. (A package's own __init__ importing its modules is no cycle: Python
    runs it first; a module importing its package's __init__ back would be.)"""
    files = {f"microgpt.{p.stem}": p for p in (ROOT / "microgpt").glob("*.py")
             if p.stem != "__init__"}
    files.update(kernel_modules())
    graph = {name: module_imports(path, name, "microgpt") & files.keys() - {name}
             for name, path in files.items()}

    def visit(name, path):
        if name in path:
            pytest.fail("import cycle: " + " -> ".join(path[path.index(name):] + [name]))
        for dep in graph[name]:
            visit(dep, path + [name])
    for name in graph:
        visit(name, [])


def test_importing_the_kernels_does_not_load_the_model():
    code = ("import sys, microgpt.kernels.gemm, microgpt.kernels.attention; "
            "print(sorted(m for m in sys.modules if m.startswith('microgpt')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env={"NUMBA_ENABLE_CUDASIM": "1", "PATH": ""}).stdout
    loaded = set(ast.literal_eval(out))
    assert not loaded & {"microgpt.model", "microgpt.backend", "microgpt.step",
                         "microgpt.config"}, loaded


def test_the_ops_that_read_or_write_a_gradient_wait_for_the_work_beside():
    """The ops that may run while the deterministic split-K's add_parts adds a weight
    gradient beside the stream (gemm.turns.beside) are declared ops, and none of those
    that read or write a gradient the products add into (the embedding's backward into
    wte's, the norm, the update) is among them."""
    from microgpt.cuda_backend import BESIDE_ADD_PARTS
    assert BESIDE_ADD_PARTS <= set(OPS)
    assert not BESIDE_ADD_PARTS & {"encoder_backward", "global_norm_squared", "adamw_update",
                                   "adamw_schedule", "record_step"}
