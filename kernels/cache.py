"""Compiled kernels kept on disk across runs, keyed on everything that changes their code.

numba-cuda's own cache (``cache=True``) keys a kernel on its bytecode, its closure's values
and the timestamp of its own file: a kernel whose helper in another module changed (a
block reduction in common, an atom in atoms) would load stale machine code. This cache keys
each compilation on
- the source of the kernel's module and of every module of its package that it imports,
  transitively (common, atoms, precision, reference's constants, ...): any edit there, and
  every kernel that could read it compiles afresh;
- the kernel itself, deeply: its bytecode and constants, what its closure holds (a
  factory's compile-time constants, the device functions it calls) and the globals it
  names, each described by value, the same way again for every function reached;
- its compile options (launch bounds, ...) and argument types (the specialization);
- the Python, numba, numba-cuda and llvmlite versions, the CUDA runtime's and NVVM's, and
  the device's compute capability.
An entry holds numba's own serialization of the compiled kernel (its PTX and cubin), so a
hit costs a file read and the driver's module load. Anything the key cannot describe is
compiled as before and not stored; so are the kernels of a process whose sources changed
on disk after they were imported (the code running is then not the code on disk).

The cache is off until ``use(directory)``; the trainer turns it on. A directory that
cannot be written (read-only, full) prints one line to stderr and the run compiles
without storing; an entry that cannot be read is a miss.
"""
import ast
import dataclasses
import enum
import functools
import hashlib
import math
import os
import pickle
import sys
import time
import types
import uuid
from pathlib import Path

import numpy as np
from numba import config, cuda

SIMULATOR = bool(config.ENABLE_CUDASIM)
FORMAT = 1                  # of the entries: a change of it is a change of every key
SUFFIX = ".kernel"
UNWRITABLE = "kernel cache: cannot write to"
_IMPORTED_AT = time.time()  # a source file modified later is not the code running


class Uncacheable(Exception):
    """What a key cannot be made of: the kernel is compiled and not stored."""


@dataclasses.dataclass
class _Settings:
    directory: Path | None = None       # None: off
    report: object = None               # report(kernel name, "cache" | "compiled", seconds)
    writable: bool = True
    say: object = None                  # say(line) for the cache's one-line notes (stderr)


_settings = _Settings()
_made = {}      # recipe -> the dispatcher this process made by it
_used = {}      # entry name -> (recipe, signature, seconds compiling or None): for the manifest
                # (kernels.ahead), the kernels this process loaded or compiled


def use(directory, report=None):
    """Keep compiled kernels in directory (None: compile every run, store nothing).
    report(name, how, seconds), if given, is called after each kernel is loaded ("cache")
    or compiled ("compiled"): the trainer's progress line."""
    _settings.directory = Path(directory) if directory is not None else None
    _settings.report = report
    _settings.writable = True


def jit(fn=None, **options):
    """cuda.jit for a kernel (not a device function) whose compilations the cache keeps:
    @jit or @jit(launch_bounds=...). In the simulator it is cuda.jit. The dispatcher's
    microgpt_recipe says how another process makes it again (None: it cannot)."""
    if fn is None:
        return functools.partial(jit, **options)
    dispatcher = cuda.jit(**options)(fn)
    dispatcher.microgpt_recipe = recipe = _recipe(sys._getframe(1), fn)
    if recipe is not None:
        _made[recipe] = dispatcher
    if not SIMULATOR:
        # the dispatcher consults its _cache object (load_overload, save_overload) in
        # compile(), which every launch of a new specialization goes through
        dispatcher._cache = DispatcherCache(dispatcher, recipe)
    return dispatcher


class DispatcherCache:
    """The cache as one dispatcher sees it: the two calls numba-cuda's compile() makes."""

    def __init__(self, dispatcher, recipe=None):
        self._dispatcher = dispatcher
        self.recipe = recipe            # how another process makes the same kernel
        self._description = None
        self._started = None

    @property
    def cache_path(self):
        return str(_settings.directory)

    def _path(self, sig):
        """The entry for sig, or None: the cache is off, or the kernel cannot be keyed."""
        if _settings.directory is None:
            return None
        try:
            return entry_path(_settings.directory, self._dispatcher, self.description, sig,
                              device_target())
        except Uncacheable:
            return None

    @property
    def description(self):
        """describe(the kernel), once: its code and closure are fixed."""
        if self._description is None:
            self._description = describe(self._dispatcher)
        return self._description

    def load_overload(self, sig, target_context):
        self._started = time.perf_counter()
        path = self._path(sig)
        kernel = read_entry(path) if path is not None else None
        if kernel is not None:
            self._used(path, sig, None)
            _report(self._dispatcher, "cache", self._started)
        return kernel

    def save_overload(self, sig, kernel):
        if not getattr(kernel, "launch_config_sensitive", False):
            path = self._path(sig)
            if path is not None:
                write_entry(path, kernel)
                self._used(path, sig, time.perf_counter() - self._started)
        _report(self._dispatcher, "compiled", self._started)

    def _used(self, path, sig, seconds):
        if self.recipe is not None:
            _used[path.name] = (self.recipe, sig, seconds)

    def flush(self):
        """numba's recompile() flushes its cache; entries here are found by key, not by
        dispatcher, so there is nothing of this dispatcher's alone to drop."""


def _say(line):
    if _settings.say is not None:
        _settings.say(line)
    else:
        print(line, file=sys.stderr, flush=True)


def _report(dispatcher, how, started):
    if _settings.report is not None:
        _settings.report(dispatcher.py_func.__name__, how,
                         time.perf_counter() - (started or time.perf_counter()))


# ----------------------------------------------------------------------------------
# the key

def device_target():
    """What the current device and toolchain add to a key: (compute capability, CUDA
    runtime version, NVVM version)."""
    from numba.cuda.cudadrv import nvvm, runtime

    return (tuple(cuda.get_current_device().compute_capability),
            runtime.runtime.get_version(), nvvm.NVVM().get_version())


def entry_path(directory, dispatcher, description, sig, target):
    """The file that holds (or will hold) dispatcher's kernel compiled for sig."""
    name = dispatcher.py_func.__name__
    return Path(directory) / f"{name}-{key(dispatcher, description, sig, target)}{SUFFIX}"


def key(dispatcher, description, sig, target):
    """sha256 of everything that changes the machine code of dispatcher (described by
    describe(dispatcher)) compiled for sig (a tuple of numba types, or a signature) on
    target (device_target())."""
    import llvmlite
    import numba
    import numba_cuda
    from numba.cuda.core import sigutils

    argtypes, _ = sigutils.normalize_signature(sig)
    parts = (FORMAT, sys.version, numba.__version__, numba_cuda.__version__,
             llvmlite.__version__, target, sources_digest(dispatcher.py_func.__module__),
             description, tuple(str(t) for t in argtypes))
    return hashlib.sha256(repr(parts).encode()).hexdigest()[:40]


@functools.cache
def _imports(module_name):
    """The modules of module_name's package that it imports (names), from its source."""
    module = sys.modules[module_name]
    tree = ast.parse(Path(module.__file__).read_text())
    package = module_name if hasattr(module, "__path__") else module_name.rpartition(".")[0]
    top = module_name.partition(".")[0]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{parent}.{base}" if base else parent
            names = [base] + [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        found.update(n for n in names if n.partition(".")[0] == top and n in sys.modules
                     and getattr(sys.modules[n], "__file__", None))
    return frozenset(found)


def _module_closure(module_name):
    """module_name and every module of its package it imports, transitively."""
    seen, todo = set(), [module_name]
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo.extend(_imports(name))
    return sorted(seen)


@functools.cache
def sources_digest(module_name):
    """sha256 of the sources of module_name and of the modules it imports from its
    package; Uncacheable if one changed on disk after this process imported it."""
    digest = hashlib.sha256()
    for name in _module_closure(module_name):
        path = Path(sys.modules[name].__file__)
        if path.stat().st_mtime > _IMPORTED_AT:
            raise Uncacheable(f"{path} changed after it was imported")
        digest.update(name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def describe(obj, memo=None):
    """A description of obj made of strings, numbers and tuples, the same in every process
    for the same code and values (never an address); Uncacheable for what it cannot tell."""
    from numba.cuda import types as nbtypes

    memo = {} if memo is None else memo
    if obj is None or isinstance(obj, (bool, int, float, complex, str, bytes)):
        return (type(obj).__name__, repr(obj))
    if isinstance(obj, (np.generic, np.dtype)):
        return ("numpy", repr(obj))
    if isinstance(obj, np.ndarray):
        return ("ndarray", obj.dtype.str, obj.shape, hashlib.sha256(obj.tobytes()).hexdigest())
    if isinstance(obj, types.ModuleType):
        return ("module", obj.__name__)
    if isinstance(obj, nbtypes.Type):
        return ("numba type", str(obj))
    if isinstance(obj, type):
        return ("class", obj.__module__, obj.__qualname__)
    if isinstance(obj, enum.Enum):
        return ("enum", describe(type(obj)), obj.name)
    if isinstance(obj, (tuple, list)):
        return (describe(type(obj)), tuple(describe(x, memo) for x in obj))
    if isinstance(obj, (set, frozenset)):
        return (describe(type(obj)), tuple(sorted(repr(describe(x, memo)) for x in obj)))
    if isinstance(obj, dict):
        return ("dict", tuple(sorted((repr(describe(k, memo)), describe(v, memo))
                                     for k, v in obj.items())))
    if dataclasses.is_dataclass(obj):
        return (describe(type(obj)), tuple((f.name, describe(getattr(obj, f.name), memo))
                                           for f in dataclasses.fields(obj)))
    if id(obj) in memo:                 # a function reached again (or recursion)
        return ("seen", memo[id(obj)])
    dispatcher_class, intrinsic_class = _numba_classes()
    if isinstance(obj, dispatcher_class):
        memo[id(obj)] = len(memo)
        return ("dispatcher", describe(obj.targetoptions, memo), describe(obj.py_func, memo))
    if isinstance(obj, types.FunctionType):
        memo[id(obj)] = len(memo)
        closure = tuple(describe(cell.cell_contents, memo) for cell in obj.__closure__ or ())
        names = _names(obj.__code__)
        named = tuple((n, describe(obj.__globals__[n], memo))
                      for n in sorted(names) if n in obj.__globals__)
        return ("function", obj.__module__, obj.__qualname__, _code(obj.__code__),
                closure, named, describe(obj.__defaults__, memo))
    if type(obj).__module__.startswith("llvmlite.ir"):     # an intrinsic's IR types
        return ("llvmlite", type(obj).__qualname__, str(obj))
    if isinstance(obj, intrinsic_class):
        memo[id(obj)] = len(memo)
        return ("intrinsic", describe(obj._defn, memo))
    raise Uncacheable(f"cannot describe a {type(obj).__module__}.{type(obj).__qualname__}")


@functools.cache
def _numba_classes():
    """numba-cuda's (dispatcher, intrinsic) classes; none in the simulator, which has its
    own stand-ins and compiles nothing."""
    if SIMULATOR:
        return (), ()
    from numba.cuda.dispatcher import CUDADispatcher
    from numba.cuda.extending import _Intrinsic
    return CUDADispatcher, _Intrinsic


def _names(code):
    """The names a code object and those nested in it look up (globals among them)."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _names(const)
    return names


def _code(code):
    """A code object by what it does: its bytecode, names and constants (nested code
    objects likewise), not by where it was loaded from."""
    consts = tuple(_code(c) if isinstance(c, types.CodeType) else describe(c)
                   for c in code.co_consts)
    return (hashlib.sha256(code.co_code).hexdigest(), code.co_names, code.co_varnames,
            code.co_freevars, consts)


# ----------------------------------------------------------------------------------
# the store

def read_entry(path):
    """The kernel stored at path, or None (absent, or unreadable: a miss)."""
    try:
        data = path.read_bytes()
    except OSError:                 # absent, or not readable: the write says why, if it fails
        return None
    from numba.cuda.dispatcher import _Kernel

    try:
        return _Kernel._rebuild(**pickle.loads(data))
    except Exception as error:      # a damaged or foreign entry: compiled again, replaced
        _say(f"kernel cache: ignoring {path} ({type(error).__name__}: {error}); compiling it "
             "again")
        return None


def write_entry(path, kernel):
    """Store kernel at path, whole or not at all (a temporary file renamed into place).
    A directory that cannot be written turns storing off for this process, in one line."""
    if not _settings.writable:
        return
    payload = pickle.dumps(kernel._reduce_states(), protocol=pickle.HIGHEST_PROTOCOL)
    temporary = path.with_name(f".{path.name}.{uuid.uuid4().hex[:12]}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary.write_bytes(payload)
        os.replace(temporary, path)
    except OSError as error:
        _settings.writable = False
        try:
            temporary.unlink(missing_ok=True)
        except OSError:
            pass
        _say(f"{UNWRITABLE} {path.parent} ({error.strerror or error}); compiling without "
             "storing kernels in this run")


# ----------------------------------------------------------------------------------
# recipes: a kernel made again by another process (kernels.ahead compiles them there)

def _recipe(frame, fn):
    """How a process makes the kernel that jit is making of fn in frame: ("global", module,
    name) at a module's top level; ("factory", module, factory, arguments, qualname) inside
    the call of a module-level function cached by functools.cache (the factories of the
    kernel modules); else None (such a kernel is compiled by the run that needs it)."""
    module = frame.f_globals.get("__name__")
    code = frame.f_code
    if code.co_name == "<module>":
        return ("global", module, fn.__name__)
    factory = getattr(sys.modules.get(module), code.co_name, None)
    if getattr(getattr(factory, "__wrapped__", None), "__code__", None) is not code:
        return None
    names = code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]
    try:
        arguments = tuple((name, frame.f_locals[name]) for name in names)
        hash(arguments)
    except (KeyError, TypeError):
        return None
    return ("factory", module, code.co_name, arguments, fn.__qualname__)


def make(recipe):
    """The dispatcher that recipe makes in this process, or None."""
    import importlib

    if recipe in _made:
        return _made[recipe]
    try:
        module = importlib.import_module(recipe[1])
        if recipe[0] == "factory":
            getattr(module, recipe[2])(**dict(recipe[3]))
        else:
            getattr(module, recipe[2], None)
    except Exception:               # the code changed under the manifest: not made here
        return None
    return _made.get(recipe)
