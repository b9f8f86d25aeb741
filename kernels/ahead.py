"""Compiling a step's kernels ahead of it, in a process per CPU, into the disk cache.

numba compiles one kernel at a time (a global compiler lock), and a step asks for its
kernels one at a time as it first launches each; here other processes compile them at
once, and the step loads them from the cache (kernels.cache). Which kernels, comes from
- a manifest, written by an earlier run of the same shape: each kernel it used, as a
  recipe (how to make it again: kernels.cache.make) and its argument types; a kernel
  whose entry is gone (a source edited, numba upgraded, the cache cleared) is compiled
  from today's code;
- or, on the first run of a shape, a recording: the step's host code run once with every
  launch listed instead of compiled and run (``record``), which the compilers then take.
The compilers are forked at the trainer's start, before its CUDA starts (a process that
forks after that cannot use CUDA in the child), and take the jobs one at a time, the
longest first. What they leave undone (a compiler died, a kernel the recording missed)
the step compiles itself, as without them.
"""
import contextlib
import math
import multiprocessing
import os
import pickle
import sys
import time
import uuid
from pathlib import Path

from . import cache
from .cache import SIMULATOR, UNWRITABLE, Uncacheable

_seconds = {}       # job -> seconds a compiler took for it: for the manifest


# ----------------------------------------------------------------------------------
# manifests

def write_manifest(path):
    """Record the kernels this process loaded or compiled (those made by a recipe) at
    path, for stale_jobs(): a pickle of (stamp, [(recipe, signature, entry name, seconds)])."""
    path = Path(path)
    old = {name: seconds for _, _, name, seconds in read_manifest(path)[1]}
    entries = [(recipe, sig, name, seconds if seconds is not None
                else _seconds.get((recipe, sig), old.get(name)))
               for name, (recipe, sig, seconds) in cache._used.items()]
    if not entries or not cache._settings.writable:
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
    return (_code_stamp(entries), cache.device_target())


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
    return (cache.FORMAT, sys.version, numba.__version__, numba_cuda.__version__,
            llvmlite.__version__, tuple((m, cache.sources_digest(m)) for m in modules))


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


# ----------------------------------------------------------------------------------
# recording a step's launches

@contextlib.contextmanager
def recording():
    """Within it, a kernel launch (or an explicit compile, as the shared-memory opt-in
    makes) runs nothing: the kernel's job (recipe, argument types) is appended to the list
    it yields, once, if jit made the kernel by a recipe. What the host code then reads of
    the device is what was there before (nothing of the step's runs)."""
    listed = []

    def note(kernel, argtypes):
        recipe = getattr(kernel, "microgpt_recipe", None)
        if recipe is not None and (recipe, argtypes) not in listed:
            listed.append((recipe, argtypes))

    with contextlib.ExitStack() as patches:
        for owner, name, replacement in _launch_points(note):
            original = getattr(owner, name)
            setattr(owner, name, replacement(original))
            patches.callback(setattr, owner, name, original)
        yield listed


def _launch_points(note):
    """(class, method, wrapper of the original) for each way a kernel compiles or runs."""
    if SIMULATOR:
        import numba
        from numba.cuda.simulator import kernel as simulated

        def launch(original):
            def listed_launch(self, *args):
                if self._device or simulated._kernel_context:     # a device function's call
                    return original(self, *args)
                note(self, tuple(numba.typeof(arg) for arg in args))
            return listed_launch
        return [(simulated.FakeCUDAKernel, "__call__", launch)]
    from numba.cuda.core import sigutils
    from numba.cuda.dispatcher import CUDADispatcher

    def call(original):
        def listed_call(self, args, launch_config):
            note(self, tuple(self.typeof_pyval(arg) for arg in args))
        return listed_call

    def compile(original):
        def listed_compile(self, sig):
            note(self, tuple(sigutils.normalize_signature(sig)[0]))
        return listed_compile
    return [(CUDADispatcher, "call", call), (CUDADispatcher, "compile", compile)]


def record(*phases):
    """The jobs of the kernels that the phases (functions of no arguments: a step's host
    code) launch, found with recording(). A phase that fails there (its host code needed
    a compiled kernel or a result) ends the recording, in one line: the kernels not
    listed are compiled by the step itself."""
    with recording() as listed:
        try:
            for phase in phases:
                phase()
        except Exception as error:
            print(f"kernels: the step's recording stopped at {type(error).__name__}: "
                  f"{error}; the step compiles what it did not list", file=sys.stderr,
                  flush=True)
    return listed


# ----------------------------------------------------------------------------------
# the compilers

def start_compiling(directory, processes=None):
    """Fork up to `processes` (default: one per CPU) processes that compile kernels into
    the cache while this process goes on with its set-up: first those that the manifests
    of earlier runs list and the cache lacks, the longest first; then those that
    Compilers.hand them (a first run's recording). -> Compilers, or None in the
    simulator or where a process cannot fork (said in one line: the step then compiles
    its kernels one after another). Call it before CUDA starts in this process: a fork
    after that is unsafe; each compiler starts CUDA on its own. Then Compilers.hand, on a
    shape's first run, and Compilers.wait before the first step."""
    if SIMULATOR:
        return None
    jobs = stale_jobs(directory)
    # a run whose manifests are all today's and complete most likely finds its kernels in
    # the cache: its compilers then wait without first making ready, which costs its start
    # the CPU time and CUDA contexts of as many processes
    warm_up = bool(jobs) or not any((Path(directory) / "manifests").glob("*.pkl"))
    count = processes or os.cpu_count() or 1
    started = []
    try:
        context = multiprocessing.get_context("fork")
        # jobs go out through a feeder thread (a Queue): a put never waits on compilers
        # that are busy, or dead
        events, more = context.SimpleQueue(), context.Queue()
        more.cancel_join_thread()
        next_job, wanted = context.Value("i", 0), context.Array("b", [1] * len(jobs))
        for _ in range(count):
            process = context.Process(target=_compile_claimed, daemon=True,
                                      args=(directory, jobs, next_job, wanted, more, events,
                                            warm_up))
            process.start()
            started.append(process)
    except (ValueError, OSError) as error:     # no fork on this platform, or no memory
        for process in started:
            process.kill()
        cache._say(f"kernels: cannot start compiling processes ({error}); the first step "
                   "compiles its kernels one after another")
        return None
    return Compilers(jobs, started, events, next_job, wanted, more)


class Compilers:
    """The forked compilers of start_compiling. Each claims the next job of the manifests'
    list (shared counter: the longest first, over all of them) that the run still wants,
    then waits for the jobs that hand() sends (a queue), and tells this process
    what it did through a queue: ("claimed", job, its pid) as it takes one, ("compiling",
    job) as it starts compiling it, (state, job, seconds) when done ("cache", "compiled",
    "failed"), ("said", line) for the lines the cache prints (said here once, whichever
    compilers said them)."""
    POLL = 0.05                 # s between looks at the queue and the processes
    LOG_EVERY = 10.0

    def __init__(self, jobs, processes, events, next_job, wanted, more):
        self.jobs, self.processes = list(jobs), processes
        self.states = [None] * len(jobs)        # by the events: None is not yet claimed
        self._events, self._next, self._wanted, self._more = events, next_job, wanted, more
        self._listed = len(jobs)                # the manifests' jobs, which the counter walks
        self._said = set()
        self._claimed = {}                      # job -> the pid of the compiler that took it
        self._handed = set()                    # hand()'s jobs
        self.stopped = False

    def hand(self, jobs, log=print):
        """Jobs of this run's step that no manifest lists (the recording of a shape's first
        run): the compilers take them next, the largest code first (a guess at the
        longest to compile: none was timed), and skip the manifests' other jobs."""
        def size(job):
            dispatcher = cache.make(job[0])
            return len(repr(dispatcher._cache.description)) if dispatcher is not None else 0
        sized = []
        for job in jobs:
            try:
                sized.append((size(job), job))
            except Uncacheable:         # compiled by the step, not stored
                pass
        self._handed.update(job for _, job in sized)
        for i, job in enumerate(self.jobs[:self._listed]):
            self._wanted[i] = int(job in self._handed)
        for _, job in sorted(sized, key=lambda pair: -pair[0]):
            if job not in self.jobs:
                self.jobs.append(job)
                self.states.append(None)
                self._more.put((len(self.jobs) - 1, job))
        log(f"kernels: the step recorded, {len(sized)} kernels handed to "
            f"{len(self.processes)} compiling processes", flush=True)

    def wait(self, manifest, log=print):
        """Until the compilers have done the jobs of this run's step, those that the
        manifest at path lists and those handed to them (they skip the other manifests'
        from now on), with progress lines; then stop them. What a compiler that died left
        undone, or every job if the cache cannot be written, is then compiled in this
        process (after one line that says why)."""
        wanted = manifest_jobs(manifest) | self._handed
        for i, job in enumerate(self.jobs[:self._listed]):
            self._wanted[i] = int(job in wanted)
        self._await([i for i, job in enumerate(self.jobs) if job in wanted], log)

    def _await(self, todo, log):
        if not todo:
            self.stop()
            return
        started = logged = time.perf_counter()
        there = {i for i in todo if self._entry_exists(i)}
        self._drain(log)        # after the look: an entry written since was said compiling
        cached = sum(1 for i in there if self.states[i] in (None, "cache"))
        log(f"kernels: compiling {len(todo) - cached} kernels (cached: {cached}) in "
            f"{len(self.processes)} processes ...", flush=True)
        loaded = set()
        while cache._settings.writable and self._pending(todo):
            time.sleep(self.POLL)
            self._drain(log)
            self._load_done(todo, loaded)
            if time.perf_counter() - logged > self.LOG_EVERY:
                logged = time.perf_counter()
                done = sum(self.states[i] in ("cache", "compiled") for i in todo)
                log(f"kernels: {done} of {len(todo)} ahead so far, "
                    f"{time.perf_counter() - started:.0f}s", flush=True)
        self._drain(log)
        if not cache._settings.writable:    # the cache's line said why; "compiled" there
            left = [i for i in todo         # may not be stored
                    if self.states[i] != "failed" and not self._entry_exists(i)]
        else:
            left = [i for i in todo if self.states[i] not in ("cache", "compiled", "failed")]
            if left:
                log(f"kernels: a compiling process ended ({self._ended()}); this process "
                    f"compiles the {len(left)} left", flush=True)
        self.stop()
        for i in left:
            self.states[i] = _compile_job(self.jobs[i], cache._say)
        if cache._settings.writable:
            self._load_done(todo, loaded)
        compiled = sum(self.states[i] == "compiled" for i in todo)
        log(f"kernels: {compiled} compiled ahead in {time.perf_counter() - started:.1f} s",
            flush=True)

    def _load_done(self, todo, loaded):
        """The recorded kernels of todo that the compilers have stored since, loaded into
        the dispatchers of the step (which its recording made) as its launches would load
        them, while the compilers finish the rest; a kernel that cannot be loaded is the
        step's to compile, or fail at. (A manifest's kernels are not: a dispatcher that
        make() made here by its factory's keywords need not be the one that the step's
        launcher gets by positional arguments from the factory's cache.)"""
        for i in todo:
            if (i not in loaded and self.jobs[i] in self._handed
                    and self.states[i] in ("cache", "compiled")):
                loaded.add(i)
                recipe, sig = self.jobs[i]
                try:
                    cache.make(recipe).compile(sig)
                except Exception:
                    pass

    def stop(self):
        """No more jobs: each compiler ends after the one it is compiling."""
        if self.stopped:
            return
        self.stopped = True
        with self._next.get_lock():
            self._next.value = self._listed
        for _ in self.processes:
            self._more.put(None)

    def _pending(self, todo):
        """The jobs of todo that a live compiler has claimed and not done, or that one may
        still claim (a job claimed by a compiler that died is not pending: it is left)."""
        alive = {p.pid for p in self.processes if p.is_alive()}
        return [i for i in todo if self.states[i] not in ("cache", "compiled", "failed")
                and (self._claimed[i] in alive if i in self._claimed else alive)]

    def _ended(self):
        codes = [p.exitcode for p in self.processes if p.exitcode]
        if not codes:
            return "without a word"
        return f"signal {-codes[0]}" if codes[0] < 0 else f"status {codes[0]}"

    def _entry_exists(self, i):
        recipe, sig = self.jobs[i]
        dispatcher = cache.make(recipe)
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
                    cache._settings.writable = False
                continue
            if what == "claimed":
                self._claimed[rest[0]] = rest[1]
                continue
            i, *seconds = rest
            self.states[i] = what
            if what == "compiled" and seconds:
                _seconds[self.jobs[i]] = seconds[0]


def _compile_claimed(directory, jobs, next_job, wanted, more, events, warm_up=False):
    """A forked compiler (warm_up: made ready first, _warm_up): the next job of the
    manifests' list that the run wants, then those handed over by the queue `more`, until
    it says None or the cache cannot be written (there is then no point to compiling
    here)."""
    import signal

    # the trainer's handlers are not this process's: Ctrl-C is the trainer's to handle,
    # and the end of the trainer's process ends this one (a daemon) by SIGTERM, quietly
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    cache.use(directory)

    def say(line):
        events.put(("said", line))
    cache._settings.say = say
    if warm_up:
        _warm_up()
    while cache._settings.writable:
        with next_job.get_lock():
            i = next_job.value
            next_job.value += 1
        if i < len(jobs):
            if not wanted[i]:
                continue
            job = jobs[i]
        else:
            handed = more.get()
            if handed is None:
                return
            i, job = handed
        events.put(("claimed", i, os.getpid()))
        started = time.perf_counter()
        state = _compile_job(job, say, events.put, i)
        events.put((state, i, time.perf_counter() - started))


def _warm_up():
    """What a compiler's first kernel would wait for, done while the trainer sets up: its
    CUDA context, and numba's compiler made ready (its typing and target contexts, NVVM)
    by a kernel of one line. Where that fails, the jobs fail and say why."""
    from numba import cuda, float32

    try:
        cache.device_target()
        cuda.jit((float32[::1],))(_one_line)
    except Exception:
        pass


def _one_line(out):
    out[0] = 1.0


def _compile_job(job, say, tell=lambda event: None, i=None):
    """Compile job (recipe, signature) into the cache unless its entry is there -> "cache",
    "compiled" or "failed" (said in one line: the run compiles it, and fails if it must)."""
    recipe, sig = job
    try:
        dispatcher = cache.make(recipe)
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
