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


def use(directory, report=None):
    """Keep compiled kernels in directory (None: compile every run, store nothing).
    report(name, how, seconds), if given, is called after each kernel is loaded ("cache")
    or compiled ("compiled"): the trainer's progress line."""
    _settings.directory = Path(directory) if directory is not None else None
    _settings.report = report
    _settings.writable = True


def jit(fn=None, **options):
    """cuda.jit for a kernel (not a device function) whose compilations the cache keeps:
    @jit or @jit(launch_bounds=...). In the simulator it is cuda.jit."""
    if fn is None:
        return functools.partial(jit, **options)
    dispatcher = cuda.jit(**options)(fn)
    if not SIMULATOR:
        # the dispatcher consults its _cache object (load_overload, save_overload) in
        # compile(), which every launch of a new specialization goes through
        dispatcher._cache = DispatcherCache(dispatcher, _recipe(sys._getframe(1), fn))
        if dispatcher._cache.recipe is not None:
            _made[dispatcher._cache.recipe] = dispatcher
    return dispatcher


class DispatcherCache:
    """The cache as one dispatcher sees it: the two calls numba-cuda's compile() makes."""

    def __init__(self, dispatcher, recipe=None):
        self._dispatcher = dispatcher
        self.recipe = recipe            # how another process makes the same kernel
        self._description = None        # described once: the code and closure are fixed
        self._started = None

    @property
    def cache_path(self):
        return str(_settings.directory)

    def _path(self, sig):
        """The entry for sig, or None: the cache is off, or the kernel cannot be keyed."""
        if _settings.directory is None:
            return None
        try:
            if self._description is None:
                self._description = describe(self._dispatcher)
            return entry_path(_settings.directory, self._dispatcher, self._description, sig,
                              device_target())
        except Uncacheable:
            return None

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
# manifests: a step's kernels, made again by other processes and compiled in parallel

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


def write_manifest(path):
    """Record the kernels this process loaded or compiled (those made by a recipe) at
    path, for stale_jobs(): a pickle of (stamp, [(recipe, signature, entry name, seconds)])."""
    path = Path(path)
    old = {name: seconds for _, _, name, seconds in read_manifest(path)[1]}
    entries = [(recipe, sig, name, seconds if seconds is not None else old.get(name))
               for name, (recipe, sig, seconds) in _used.items()]
    if not entries or not _settings.writable:
        return
    temporary = path.with_name(f".{path.name}.{uuid.uuid4().hex[:12]}.tmp")
    try:
        stamp = _stamp(entries)
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary.write_bytes(pickle.dumps((stamp, entries), protocol=pickle.HIGHEST_PROTOCOL))
        os.replace(temporary, path)
    except (OSError, Uncacheable, pickle.PicklingError, TypeError, AttributeError):
        # a manifest only saves time: one that cannot be written is skipped
        try:
            temporary.unlink(missing_ok=True)
        except OSError:
            pass


def read_manifest(path):
    """-> (stamp, entries) as write_manifest wrote them; (None, []) for no manifest."""
    try:
        stamp, entries = pickle.loads(Path(path).read_bytes())
        return stamp, [(recipe, sig, name, seconds) for recipe, sig, name, seconds in entries]
    except Exception:       # absent, damaged, or of code that is gone: no manifest
        return None, []


def _stamp(entries):
    """What the entries' keys depend on beyond each kernel, (code, target): while it is the
    same, the names in a manifest are the names that the kernels would look up now."""
    return (_code_stamp(entries), device_target())


def _code_stamp(entries):
    """The stamp's part that needs no GPU: the versions, and the sources of the kernels'
    modules (imported here if they are not yet: a module that is gone raises)."""
    import importlib

    import llvmlite
    import numba
    import numba_cuda

    modules = sorted({recipe[1] for recipe, _, _, _ in entries})
    for module in modules:
        importlib.import_module(module)
    return (FORMAT, sys.version, numba.__version__, numba_cuda.__version__,
            llvmlite.__version__, tuple((m, sources_digest(m)) for m in modules))


def manifest_jobs(path):
    """The (recipe, signature) pairs that the manifest at path lists."""
    return {(recipe, sig) for recipe, sig, _, _ in read_manifest(path)[1]}


def stale_jobs(directory):
    """The kernels that the manifests in directory/manifests list and the cache may lack,
    as jobs (recipe, signature), the longest to compile first (as the manifests timed
    them; one never timed first of all). Found without CUDA (a process forks its
    compilers before CUDA starts): a manifest whose versions and sources are today's
    lists the entries its kernels would look up on the same GPU, and only those absent
    are jobs; every kernel of any other manifest is (a compiler skips it if its key is
    there after all)."""
    seconds = {}
    for path in sorted((Path(directory) / "manifests").glob("*.pkl")):
        stamp, entries = read_manifest(path)
        try:
            today = stamp is not None and stamp[0] == _code_stamp(entries)
        except Exception:           # a module gone or changed while running: not ahead
            continue
        for recipe, sig, name, took in entries:
            if not today or not (Path(directory) / name).exists():
                took = math.inf if took is None else took
                seconds[recipe, sig] = max(seconds.get((recipe, sig), 0.0), took)
    return sorted(seconds, key=lambda job: -seconds[job])


def start_compiling(directory, processes=None):
    """Fork up to `processes` (default: one per CPU) processes that compile, longest first,
    the kernels that the manifests of earlier runs list and the cache lacks, while this
    process goes on with its set-up: Compilers, or None when there is nothing to compile.
    Call it before CUDA starts in this process: a fork after that is unsafe; each
    compiler starts CUDA on its own. Then Compilers.wait before the first step."""
    if SIMULATOR:
        return None
    import multiprocessing

    jobs = stale_jobs(directory)
    if not jobs:
        return None
    context = multiprocessing.get_context("fork")
    events, next_job = context.SimpleQueue(), context.Value("i", 0)
    wanted = context.Array("b", [1] * len(jobs))
    compilers = [context.Process(target=_compile_claimed, daemon=True,
                                 args=(directory, jobs, next_job, wanted, events))
                 for _ in range(min(len(jobs), processes or os.cpu_count() or 1))]
    for process in compilers:
        process.start()
    return Compilers(jobs, compilers, events, next_job, wanted)


class Compilers:
    """The forked compilers of start_compiling. Each claims the next job of the list
    (shared counter: the longest first, over all of them) that the run still wants, and
    tells this process what it did through a queue: ("compiling", job) as it starts one,
    (state, job) when done ("cache", "compiled", "failed"), ("said", line) for the lines
    the cache prints (said here once, whichever compilers said them)."""
    POLL = 0.05                 # s between looks at the queue and the processes
    LOG_EVERY = 10.0

    def __init__(self, jobs, processes, events, next_job, wanted):
        self.jobs, self.processes = jobs, processes
        self.states = [None] * len(jobs)        # by the events: None is not yet claimed
        self._events, self._next, self._wanted = events, next_job, wanted
        self._said = set()

    def wait(self, manifest, log=print):
        """Until the compilers have done the jobs that the manifest at path lists (they skip
        the rest from now on), with progress lines; what a compiler that died left undone,
        or every job of the manifest if the cache cannot be written, is then compiled in
        this process (after one line that says why)."""
        wanted = manifest_jobs(manifest)
        for i, job in enumerate(self.jobs):
            self._wanted[i] = int(job in wanted)
        todo = [i for i, job in enumerate(self.jobs) if job in wanted]
        if not todo:
            self.stop()
            return
        started = logged = time.perf_counter()
        there = {i for i in todo if self._entry_exists(i)}
        self._drain(log)        # after the look: an entry written since was said compiling
        cached = sum(1 for i in there if self.states[i] in (None, "cache"))
        log(f"kernels: compiling {len(todo) - cached} kernels (cached: {cached}) in "
            f"{len(self.processes)} processes ...", flush=True)
        while any(self.states[i] not in ("cache", "compiled", "failed") for i in todo):
            if not _settings.writable or not any(p.is_alive() for p in self.processes):
                break
            time.sleep(self.POLL)
            self._drain(log)
            if time.perf_counter() - logged > self.LOG_EVERY:
                logged = time.perf_counter()
                done = sum(self.states[i] in ("cache", "compiled") for i in todo)
                log(f"kernels: {done} of {len(todo)} ahead so far, "
                    f"{time.perf_counter() - started:.0f}s", flush=True)
        self._drain(log)
        if not _settings.writable:      # the cache's line said why; "compiled" there may
            left = [i for i in todo     # not be stored
                    if self.states[i] != "failed" and not self._entry_exists(i)]
        else:
            left = [i for i in todo if self.states[i] not in ("cache", "compiled", "failed")]
            if left:
                log(f"kernels: a compiling process ended ({self._ended()}); this process "
                    f"compiles the {len(left)} left", flush=True)
        self.stop()
        for i in left:
            self.states[i] = _compile_job(self.jobs[i], _say)
        compiled = sum(self.states[i] == "compiled" for i in todo)
        log(f"kernels: {compiled} compiled ahead in {time.perf_counter() - started:.1f} s",
            flush=True)

    def stop(self):
        """No more jobs: each compiler ends after the one it is compiling."""
        with self._next.get_lock():
            self._next.value = len(self.jobs)

    def _ended(self):
        codes = [p.exitcode for p in self.processes if p.exitcode]
        if not codes:
            return "without a word"
        return f"signal {-codes[0]}" if codes[0] < 0 else f"status {codes[0]}"

    def _entry_exists(self, i):
        recipe, sig = self.jobs[i]
        dispatcher = make(recipe)
        entry = dispatcher._cache._path(sig) if dispatcher is not None else None
        return entry is not None and entry.exists()

    def _drain(self, log):
        while not self._events.empty():
            what, *rest = self._events.get()
            if what == "said":
                if rest[0] not in self._said:       # once, whichever compilers said it
                    self._said.add(rest[0])
                    print(rest[0], file=sys.stderr, flush=True)
                if rest[0].startswith(UNWRITABLE):
                    _settings.writable = False
            else:
                self.states[rest[0]] = what


def _compile_claimed(directory, jobs, next_job, wanted, events):
    """A forked compiler: the next job that the run wants, until none is left or the cache
    cannot be written (there is then no point to compiling here)."""
    import signal

    # the trainer's handlers are not this process's: Ctrl-C is the trainer's to handle,
    # and the end of the trainer's process ends this one (a daemon) by SIGTERM, quietly
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    use(directory)

    def say(line):
        events.put(("said", line))
    _settings.say = say
    while _settings.writable:
        with next_job.get_lock():
            i = next_job.value
            next_job.value += 1
        if i >= len(jobs):
            return
        if wanted[i]:
            events.put((_compile_job(jobs[i], say, events.put, i), i))


def _compile_job(job, say, tell=lambda event: None, i=None):
    """Compile job (recipe, signature) into the cache unless its entry is there -> "cache",
    "compiled" or "failed" (said in one line: the run compiles it, and fails if it must)."""
    recipe, sig = job
    try:
        dispatcher = make(recipe)
        entry = dispatcher._cache._path(sig) if dispatcher is not None else None
        if entry is None:
            return "failed"
        if entry.exists():
            return "cache"
        tell(("compiling", i))
        dispatcher.compile(sig)
        return "compiled"
    except Exception as error:
        say(f"kernel cache: could not compile {recipe[-1]} ahead of the run "
            f"({type(error).__name__}: {error}); the run compiles it")
        return "failed"
