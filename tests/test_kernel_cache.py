"""The disk cache of compiled kernels (kernels/cache.py), on a machine without a GPU.

numba-cuda compiles to PTX and nvJitLink to a cubin without a GPU, so everything but the
driver's module load runs here: the key, the store, the dispatcher's load path and
invalidation. Runs of a small package of kernels in fresh processes (this file run as a
script, without the simulator that conftest turns on for the test process) play the
trainer's runs one after another on one cache directory: the first compiles and stores,
the second loads every kernel, and after an edit of a helper the kernels that import it
compile afresh while the others still load. The fallbacks (a directory that cannot be
written, a full disk, a damaged entry, sources edited while a run was going) print one
line each and compile."""
import contextlib
import errno
import hashlib
import json
import os
import pickle
import signal
import subprocess
import sys
import textwrap
import time
import types
from pathlib import Path

import pytest

from microgpt.kernels import ahead, cache

HELPER = """
from numba import cuda


@cuda.jit(device=True)
def scale(x):
    return x * 2.0
"""
OPS = """
import functools

from numba import cuda, float32

from microgpt.kernels.cache import jit

from .helper import scale

SIG = (float32[::1], float32[::1])


@jit
def scaled(out, a):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = scale(a[i])


@functools.cache
def shifted(c):
    @jit
    def shifted_kernel(out, a):
        i = cuda.grid(1)
        if i < out.size:
            out[i] = a[i] + c
    return shifted_kernel


KERNELS = {"scaled": (scaled, SIG), "shifted 1": (shifted(1.0), SIG),
           "shifted 3": (shifted(3.0), SIG)}
"""
OTHER = """
from numba import cuda, float32

from microgpt.kernels.cache import jit

SIG = (float32[::1], float32[::1])


def copy(out, a):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = a[i]


KERNELS = {"copied": (jit(copy), SIG), "bounded": (jit(launch_bounds=(64, 1))(copy), SIG)}
"""
CC = (9, 0, "a")


def run_kernels(package, directory, mode="plain"):
    """One run: compile (or load) every kernel of the package -> {name: record}, and the
    run's stderr. A fresh process without the simulator (this file as a script)."""
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    done = subprocess.run([sys.executable, __file__, str(package), str(directory), mode],
                          env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1]), done.stderr


def write_package(root):
    package = root / "kpkg"
    package.mkdir()
    for name, text in (("__init__", ""), ("helper", HELPER), ("ops", OPS), ("other", OTHER)):
        (package / f"{name}.py").write_text(text)
    return root


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The runs on one cache: first, second, after an edit of the helper (with a damaged
    entry of a kernel that does not use it), after another edit with the kernels that the
    manifest lists and the cache lacks compiled ahead by two forked compilers, one of
    which dies (each run a process of its own: ~2 s, most of it numba's import)."""
    root = write_package(tmp_path_factory.mktemp("kernels"))
    directory = root / "cache"
    first, first_err = run_kernels(root, directory, "first")
    listed = first.pop("listed")
    second, second_err = run_kernels(root, directory)
    helper = root / "kpkg" / "helper.py"
    helper.write_text(helper.read_text().replace("x * 2.0", "x * 3.0"))
    damaged = directory / first["copied"]["entry"]
    damaged.write_bytes(b"not a kernel")
    edited, edited_err = run_kernels(root, directory)
    helper.write_text(helper.read_text().replace("x * 3.0", "x * 4.0"))
    ahead, ahead_err = run_kernels(root, directory, "ahead")
    compiled_ahead = ahead.pop("ahead")
    recorded, recorded_err = run_kernels(root, root / "fresh", "recorded")
    return dict(first=first, listed=listed, second=second, edited=edited, ahead=ahead,
                compiled_ahead=compiled_ahead, recorded=recorded,
                errors=dict(first=first_err, second=second_err, edited=edited_err,
                            ahead=ahead_err, recorded=recorded_err),
                directory=directory, root=root)


def test_a_second_run_loads_every_kernel_the_first_compiled(runs):
    first, second = runs["first"], runs["second"]
    assert {r["how"] for r in first.values()} == {"compiled"}
    assert {r["how"] for r in second.values()} == {"cache"}
    for name in first:
        assert second[name]["cubin"] == first[name]["cubin"], name
        assert second[name]["ptx"] == first[name]["ptx"], name
    assert runs["errors"]["first"] == runs["errors"]["second"] == ""
    entries = {p.name for p in runs["directory"].iterdir()} - {"manifests"}
    # the first run's, and the two edited runs' of the three kernels that read the helper
    assert entries == ({r["entry"] for r in first.values()}
                       | {r["entry"] for r in runs["edited"].values()}
                       | {r["entry"] for r in runs["ahead"].values()})
    assert len(entries) == len(first) + 3 + 3


def test_every_kernel_of_the_package_is_cached_and_can_be_keyed(runs):
    """Every kernel that a module of microgpt.kernels lists (PTX_SIGNATURES, the kernels
    test_compile compiles) is declared with cache.jit, and its key can be made."""
    listed = runs["listed"]
    assert listed["keyed"] > 50
    assert listed["not_cached"] == [] and listed["uncacheable"] == []


def test_every_specialization_is_an_entry_of_its_own(runs):
    first = runs["first"]
    # a factory's constants and the launch bounds are in the code, and in the key
    assert len({r["entry"] for r in first.values()}) == len(first)
    assert first["shifted 1"]["ptx"] != first["shifted 3"]["ptx"]
    assert first["copied"]["ptx"] != first["bounded"]["ptx"]


def test_editing_a_helper_compiles_the_kernels_that_import_it_afresh(runs):
    first, edited = runs["first"], runs["edited"]
    for name in ("scaled", "shifted 1", "shifted 3"):        # ops imports the helper
        assert edited[name]["how"] == "compiled", name
        assert edited[name]["entry"] != first[name]["entry"], name
    assert edited["scaled"]["ptx"] != first["scaled"]["ptx"]   # 3.0, not the stale 2.0
    assert edited["shifted 1"]["ptx"] == first["shifted 1"]["ptx"]
    assert edited["bounded"]["how"] == "cache"                 # other does not import it


def test_the_manifest_makes_the_missing_kernels_again_and_compiles_them_ahead(runs):
    ahead, edited, told = runs["ahead"], runs["edited"], runs["compiled_ahead"]
    # the three that read the edited helper; copied and bounded share one recipe
    assert len(told["jobs"]) == 4
    assert told["log"][0] == "kernels: compiling 3 kernels (cached: 1) in 2 processes ..."
    # the compiler that took scaled was killed: the one line, and this process made it
    assert told["log"][1] == ("kernels: a compiling process ended (signal 9); this process "
                              "compiles the 1 left")
    assert told["log"][2].startswith("kernels: 3 compiled ahead in ") and len(told["log"]) == 3
    # while it waited, this process compiled scaled (a manifest's kernels it does not load)
    assert told["waiting"] == {"scaled": "compiled"}
    assert ahead["scaled"]["how"] == "made before"
    assert {r["how"] for name, r in ahead.items() if name != "scaled"} == {"cache"}
    assert ahead["scaled"]["ptx"] != edited["scaled"]["ptx"]  # x * 4.0 now
    assert ahead["bounded"]["entry"] == edited["bounded"]["entry"]
    assert runs["errors"]["ahead"] == ""


def test_a_first_run_compiles_its_recorded_kernels_ahead_and_the_missed_one_itself(runs):
    recorded = runs["recorded"]
    told = recorded.pop("recorded")
    # five kernels, of four recipes (copied and bounded share one), one of them missed
    assert (told["listed"], told["handed"]) == (4, 3)
    assert told["log"][:2] == ["kernels: the step recorded, 3 kernels handed to 2 compiling "
                               "processes",
                               "kernels: compiling 3 kernels (cached: 0) in 2 processes ..."]
    assert told["log"][2].startswith("kernels: 3 compiled ahead in ") and len(told["log"]) == 3
    assert told["waiting"] == {"scaled": "cache", "shifted_kernel": "cache", "copy": "cache"}
    # the step compiles the missed one, and copied, whose recipe makes bounded
    assert {name: r["how"] for name, r in recorded.items()} == {
        "scaled": "made before", "shifted 1": "made before", "shifted 3": "compiled",
        "bounded": "made before", "copied": "compiled"}
    assert runs["errors"]["recorded"] == ""


def test_a_damaged_entry_is_compiled_again_and_replaced(runs):
    assert runs["edited"]["copied"]["how"] == "compiled"
    assert runs["edited"]["copied"]["cubin"] == runs["first"]["copied"]["cubin"]
    lines = runs["errors"]["edited"].splitlines()
    assert len(lines) == 1 and "ignoring" in lines[0] and "compiling it again" in lines[0]
    entry = runs["directory"] / runs["first"]["copied"]["entry"]
    assert entry.read_bytes() != b"not a kernel"


def test_a_directory_that_cannot_be_written_says_so_once_and_stores_nothing(
        tmp_path, monkeypatch, capsys):
    blocked = tmp_path / "a file"
    blocked.write_text("in the way of the cache directory")
    monkeypatch.setattr(cache, "_settings", cache._Settings(directory=blocked / "cache"))
    kernel = types.SimpleNamespace(_reduce_states=lambda: {"cubin": b"x" * 100})
    for name in ("a", "b"):
        cache.write_entry(blocked / "cache" / f"{name}{cache.SUFFIX}", kernel)
    assert not cache._settings.writable
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("kernel cache: cannot write to ") and "without storing" in lines[0]
    assert cache.read_entry(blocked / "cache" / f"a{cache.SUFFIX}") is None   # a miss


def test_a_full_disk_leaves_no_partial_entry_and_says_so_once(tmp_path, monkeypatch, capsys):
    def no_space(path, data):
        with open(path, "wb") as f:         # what a full disk does: a part, then ENOSPC
            f.write(data[:3])
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
    monkeypatch.setattr(Path, "write_bytes", no_space)
    monkeypatch.setattr(cache, "_settings", cache._Settings(directory=tmp_path))
    kernel = types.SimpleNamespace(_reduce_states=lambda: {"cubin": b"x" * 100})
    for name in ("a", "b"):
        cache.write_entry(tmp_path / f"{name}{cache.SUFFIX}", kernel)
        assert not cache._settings.writable     # the next kernels are not even tried
    assert list(tmp_path.iterdir()) == []
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and "No space left on device" in lines[0]


def test_a_manifest_that_cannot_be_read_or_written_only_costs_its_time(tmp_path, monkeypatch):
    monkeypatch.setattr(cache, "_settings", cache._Settings(directory=tmp_path))
    monkeypatch.setattr(cache, "device_target", lambda: (CC, "runtime", "nvvm"))
    damaged = tmp_path / "manifests" / "damaged.pkl"
    damaged.parent.mkdir()
    damaged.write_bytes(b"not a manifest")
    assert ahead.read_manifest(damaged) == (None, []) and ahead.stale_jobs(tmp_path) == []
    lock = __import__("threading").Lock()       # a factory argument pickle cannot take
    # (the stamp imports a recipe's module: one that an installed package has, as CI's)
    recipe = ("global", "microgpt.kernels.elementwise", "k", lock)
    monkeypatch.setattr(cache, "_used", {"k.kernel": (recipe, (), 1.0)})
    ahead.write_manifest(tmp_path / "manifests" / "shape.pkl")
    assert [p.name for p in damaged.parent.iterdir()] == ["damaged.pkl"]


def test_the_jobs_ahead_are_the_kernels_the_cache_lacks_the_longest_first(tmp_path):
    module = "microgpt.kernels.elementwise"

    def listed(name, seconds):
        return (("global", module, name), ("float32[::1]",), f"{name}-key.kernel", seconds)
    (tmp_path / "manifests").mkdir()
    other = [listed("a", 1.0), listed("b", 5.0), listed("c", None)]     # c never timed
    (tmp_path / "manifests" / "other.pkl").write_bytes(
        pickle.dumps(((("other sources",), "target"), other)))
    today = [listed("b", 7.0), listed("d", 2.0), listed("e", 9.0)]
    (tmp_path / "e-key.kernel").write_bytes(b"an entry")                  # cached
    (tmp_path / "manifests" / "today.pkl").write_bytes(
        pickle.dumps(((ahead._code_stamp(today), "target"), today)))
    assert [recipe[2] for recipe, _ in ahead.stale_jobs(tmp_path)] == ["c", "b", "d", "a"]


class _Told(list):
    """The compilers' queue, as this process reads it."""

    def empty(self):
        return not self

    def get(self):
        return self.pop(0)

    put = list.append


def _jobs(n):
    return [(("global", "kpkg.ops", f"k{i}"), ("float32[::1]",)) for i in range(n)]


def test_an_unwritable_cache_is_said_once_and_this_process_compiles_the_rest(
        tmp_path, monkeypatch, capsys):
    jobs = _jobs(3)
    monkeypatch.setattr(cache, "_settings", cache._Settings(directory=tmp_path))
    monkeypatch.setattr(ahead, "manifest_jobs", lambda path: set(jobs))
    monkeypatch.setattr(ahead.Compilers, "_entry_exists", lambda self, i: i == 0)
    here = []
    monkeypatch.setattr(ahead, "_compile_job",
                        lambda job, say: here.append(job[0][2]) or "compiled")
    line = (f"{cache.UNWRITABLE} {tmp_path} (Read-only file system); compiling without "
            "storing kernels in this run")
    # both compilers found the cache unwritable, one after compiling k1 (not stored)
    told = _Told([("cache", 0), ("compiling", 1), ("said", line), ("compiled", 1),
                  ("said", line)])
    ended = types.SimpleNamespace(is_alive=lambda: False, exitcode=0)
    claimed = types.SimpleNamespace(value=2, get_lock=contextlib.nullcontext)
    compilers = ahead.Compilers(jobs, [ended, ended], told, claimed, [1, 1, 1], _Told())
    log = []
    compilers.wait(tmp_path / "shape.pkl", log=lambda text, flush: log.append(text))
    assert capsys.readouterr().err.splitlines() == [line]
    assert here == ["k1", "k2"] and not cache._settings.writable
    assert claimed.value == 3                   # the compilers take no more
    assert log[0] == "kernels: compiling 2 kernels (cached: 1) in 2 processes ..."


def test_a_compiler_stops_at_an_unwritable_cache(tmp_path, monkeypatch):
    monkeypatch.setattr(cache, "_settings", cache._Settings())
    monkeypatch.setattr(signal, "signal", lambda signum, handler: None)    # pytest's own

    def unwritable(job, say, tell, i):
        cache._settings.writable = False
        say("kernel cache: cannot write to ...")
        return "compiled"
    monkeypatch.setattr(ahead, "_compile_job", unwritable)
    told = []
    claimed = types.SimpleNamespace(value=0, get_lock=contextlib.nullcontext)
    ahead._compile_claimed(tmp_path, _jobs(3), claimed, [1, 1, 1], _Told(),
                           types.SimpleNamespace(put=told.append))
    assert [event[:2] for event in told] == [("claimed", 0), ("said", "kernel cache: cannot "
                                             "write to ..."), ("compiled", 0)]
    assert claimed.value == 1


# ----------------------------------------------------------------------------------
# the key, in this process (no compilation)

SCALE = 2.0


def _kernel_like(c):
    def kernel(out, a):
        out[0] = a[0] * SCALE + c
    return kernel


def test_the_description_covers_closures_globals_and_called_code():
    described = cache.describe(_kernel_like(1.0))
    assert cache.describe(_kernel_like(1.0)) == described        # no ids or addresses
    assert cache.describe(_kernel_like(2.0)) != described        # a factory's constant
    globals()["SCALE"] = 3.0
    try:
        assert cache.describe(_kernel_like(1.0)) != described    # a global it names
    finally:
        globals()["SCALE"] = 2.0

    def calls(helper):
        def kernel(out):
            out[0] = helper(1.0)
        return kernel
    assert (cache.describe(calls(lambda x: x + 1)) != cache.describe(calls(lambda x: x + 2)))


def test_what_cannot_be_described_is_not_cached():
    lock = __import__("threading").Lock()
    with pytest.raises(cache.Uncacheable):
        cache.describe((lambda: lock)())
    with pytest.raises(cache.Uncacheable):
        cache.describe(_kernel_like(lock))


def test_the_sources_are_those_the_module_imports_transitively():
    import microgpt.kernels.layernorm  # noqa: F401

    modules = cache._module_closure("microgpt.kernels.layernorm")
    assert {"microgpt.kernels.layernorm", "microgpt.kernels.common",
            "microgpt.kernels.precision", "microgpt.kernels.atoms",
            "microgpt.reference"} <= set(modules)
    assert "microgpt.train" not in modules and "microgpt.model" not in modules


def test_a_source_edited_after_its_import_is_not_cached(tmp_path, monkeypatch):
    module = tmp_path / "edited_after_import.py"
    module.write_text("X = 1\n")
    before = cache._IMPORTED_AT - 60            # written before this process began
    os.utime(module, (before, before))
    monkeypatch.syspath_prepend(str(tmp_path))
    __import__("edited_after_import")
    assert cache.sources_digest("edited_after_import")
    cache.sources_digest.cache_clear()
    os.utime(module, (time.time() + 60, time.time() + 60))
    with pytest.raises(cache.Uncacheable, match="changed after it was imported"):
        cache.sources_digest("edited_after_import")
    cache.sources_digest.cache_clear()


def test_the_trainer_counts_the_kernels_as_they_come(monkeypatch, capsys, tmp_path):
    from microgpt.progress import KernelProgress

    kernels = KernelProgress(tmp_path / "kernels")
    monkeypatch.setattr(KernelProgress, "LOG_EVERY", -1.0)      # a log, not a terminal
    kernels("layernorm_forward_kernel", "compiled", 1.5)
    kernels("adamw_kernel", "cache", 0.01)
    assert capsys.readouterr().out.splitlines() == [
        "kernels: 1 ready (1 compiled, 0 from the cache) so far, 0s",
        "kernels: 2 ready (1 compiled, 1 from the cache) so far, 0s"]
    assert kernels.summary().startswith("kernels: 2 ready (1 compiled, 1 from the cache) in ")
    assert kernels.summary().endswith(f"the cache is {tmp_path / 'kernels'}")


# ----------------------------------------------------------------------------------
# one run, in a process without the simulator

def _compile_without_a_gpu():
    """Let numba-cuda compile and link for CC with no device: what a context would tell it
    (the compute capability), and bind() making the cubin instead of loading it."""
    from numba.cuda import codegen, dispatcher

    dispatcher.get_current_device = lambda: types.SimpleNamespace(compute_capability=CC)
    codegen.CUDACodeLibrary._ensure_cc = lambda self, cc: cc or CC
    dispatcher._Kernel.bind = lambda self: self._codelibrary.get_cubin()
    cache.device_target = lambda: (CC, "runtime", "nvvm")


def _main(package, directory, mode):
    import importlib

    import numpy as np

    _compile_without_a_gpu()
    sys.path.insert(0, package)
    how = {}
    cache.use(directory, report=lambda name, done, seconds: how.update({name: done}))
    records = {}
    manifest = directory / "manifests" / "shape.pkl"
    if mode == "recorded":
        # the first run of a shape: no manifest, the compilers wait for the recording,
        # which misses a kernel (the step compiles it, as without the compilers)
        compilers = ahead.start_compiling(directory, processes=2)
        with ahead.recording() as listed:
            for module in ("kpkg.ops", "kpkg.other"):
                for kernel, _ in importlib.import_module(module).KERNELS.values():
                    # (128 blocks: numba warns of fewer)
                    kernel[128, 32](np.zeros(4, np.float32), np.zeros(4, np.float32))
        log = []
        missed = ("factory", "kpkg.ops", "shifted", (("c", 3.0),))
        handed = [job for job in listed if job[0][:4] != missed]
        compilers.hand(handed, log=lambda text, flush: log.append(text))
        compilers.wait(manifest, log=lambda text, flush: log.append(text))
        records["recorded"] = {"listed": len(listed), "handed": len(handed), "log": log,
                               "waiting": dict(how)}
    if mode == "ahead":
        compile_job = ahead._compile_job

        def dies_at_scaled(job, say, tell=lambda event: None, i=None):
            if i is not None and job[0][-1] == "scaled":      # in a compiler
                os.kill(os.getpid(), signal.SIGKILL)
            return compile_job(job, say, tell, i)
        ahead._compile_job = dies_at_scaled
        # forked, compiling without a GPU as this process does
        compilers = ahead.start_compiling(directory, processes=2)
        log = []
        compilers.wait(manifest, log=lambda text, flush: log.append(text))
        records["ahead"] = {"jobs": [recipe[-1] for recipe, _ in compilers.jobs], "log": log,
                            "waiting": dict(how)}
    for module in ("kpkg.ops", "kpkg.other"):
        for name, (kernel, sig) in importlib.import_module(module).KERNELS.items():
            how.clear()
            compiled = kernel.compile(sig)
            library = compiled._codelibrary
            cubin = library.get_cubin()         # cuda.core's ObjectCode
            entry = cache.entry_path(directory, kernel, cache.describe(kernel), sig,
                                     cache.device_target()).name
            records[name] = {"how": how.get(kernel.py_func.__name__, "made before"),
                             "entry": entry,
                             "ptx": hashlib.sha256(library.get_asm_str().encode()).hexdigest(),
                             "cubin": hashlib.sha256(bytes(cubin.code)).hexdigest()}
    ahead.write_manifest(manifest)
    if mode == "first":
        records["listed"] = _key_every_listed_kernel()
    print(json.dumps(records))


def _key_every_listed_kernel():
    import importlib
    import pkgutil

    import microgpt.kernels

    listed = {"keyed": 0, "not_cached": [], "uncacheable": []}
    for info in pkgutil.walk_packages(microgpt.kernels.__path__, "microgpt.kernels."):
        if info.name.endswith("atoms.simulator"):       # the twins, never compiled
            continue
        module = importlib.import_module(info.name)
        for kernel, sig in getattr(module, "PTX_SIGNATURES", []):
            name = f"{info.name}.{kernel.py_func.__name__}"
            if not isinstance(kernel._cache, cache.DispatcherCache):
                listed["not_cached"].append(name)
            try:
                cache.key(kernel, cache.describe(kernel), sig, cache.device_target())
                listed["keyed"] += 1
            except cache.Uncacheable as error:
                listed["uncacheable"].append(f"{name}: {error}")
    return listed


if __name__ == "__main__":
    _main(sys.argv[1], Path(sys.argv[2]), sys.argv[3])
