"""Shared memory in numba's CUDA simulator: a locked allocation, and a race check.

The simulator (numba-cuda 0.30, simulator/kernel.py and kernelapi.py) runs each thread of
a block as a Python thread and a block's shared arrays as plain NumPy arrays. Its threads
rarely interleave badly enough to show a missing cuda.syncthreads(): a kernel that reads
a tile before the barrier that should follow its staging mostly reads the right values
anyway, and passes. With the check on, a missing barrier fails every time it is crossed:

- Each thread carries a vector clock: its own epoch, which it advances at every
  synchronisation it takes part in, and the latest epoch of every other thread of the
  block that it has synchronised with since. cuda.syncthreads() gives every thread the
  epochs all had at the barrier; a named barrier (bar.sync among some warps) joins its
  participants' clocks; an mbarrier's arrive (and a bulk copy's completion on it)
  releases the arriving thread's clock into the barrier, and a try_wait that finds the
  phase complete acquires it. These are the only ways the kernels order their threads.
- Each element of a shared array records the thread and the epoch of its last write
  (one int64 stamp) and, per thread, the epoch of its last read.
- A read of an element written by another thread in an epoch the reader has not
  synchronised with, or a write of one read or written so, raises RaceError naming the
  kernel, the array, the element and the two threads. Atomics on shared memory are
  accesses like any other, except that two atomics never race with each other.

The warp-collective twins (kernels' shared-memory reductions, the mma, ldmatrix and
shuffle twins) synchronise the whole block with cuda.syncthreads(), so they order what
they exchange, and they are checked as any kernel code is. A warp's lanes are not ordered
by the check between barriers: the kernels never rely on lockstep (the simulator has none).

What the check approximates: a named barrier's or an mbarrier's joined clock accumulates
across its phases, so a thread may count as ordered after accesses of a later phase than
the one it waited for; that can hide a race, never invent one.

Shared arrays are wrapped (CheckedArray) only while ``checking()`` is on; the wrapper
indexes, slices and reshapes like the NumPy array it holds, and the simulator's atomics
and the mbarrier and named-barrier twins unwrap it. Dynamic shared memory (every
``cuda.shared.array(0, dtype)`` of a launch aliases one buffer) is tracked in 2-byte
granules, so its views of different dtypes see each other's accesses.
"""
import contextlib
import itertools
import linecache
import re
import sys
import threading

import numpy as np

TWINS = "microgpt.kernels.atoms.simulator"    # the mbarrier and named-barrier twins
_TID_BITS = 10                       # a block has at most 1024 threads
_ATOMIC = 1 << _TID_BITS             # a write stamp's flag: the write was an atomic
_SHIFT = _TID_BITS + 1               # stamp = epoch << _SHIFT | atomic flag | thread
_TID_MASK = (1 << _TID_BITS) - 1
_BLOCK_EPOCHS = 1 << 24              # a block's epochs start above the previous block's
_DYNAMIC_GRANULE = 2                 # bytes: the smallest element of dynamic shared arrays


class RaceError(AssertionError):
    """Two threads of a block touched one shared element with no barrier between."""


_checking = False
_blocks = itertools.count(1)
_lock = threading.Lock()


@contextlib.contextmanager
def checking():
    """The race check on for the kernels launched inside (shared arrays allocated then)."""
    global _checking
    saved, _checking = _checking, True
    try:
        yield
    finally:
        _checking = saved


# ----------------------------------------------------------------------------------
# the clocks: per block, per thread

class _Block:
    """What the threads of one simulated block share for the check."""

    def __init__(self, manager):
        self.dims = tuple(manager._block_dim)
        self.n = int(np.prod(self.dims))
        self.kernel = getattr(manager._f, "__name__", "kernel")
        self.base = next(_blocks) * _BLOCK_EPOCHS
        self.posted = np.full(self.n, self.base, np.int64)    # epochs at the barrier
        self.snapshot, self.generation = None, 0
        self.joins = {}        # a named barrier's or an mbarrier's accumulated clock
        self.lock = threading.Lock()

    def join(self, key):
        with self.lock:
            clock = self.joins.get(key)
            if clock is None:
                clock = self.joins[key] = np.full(self.n, self.base, np.int64)
        return clock

    def thread_name(self, tid):
        x, y = self.dims[0], self.dims[1]
        return f"thread {tid} (threadIdx {(tid % x, tid // x % y, tid // (x * y))})"


class _Thread:
    """A simulated thread's clock: `own` is its epoch, clock[t] the latest epoch of
    thread t it is ordered after (clock[tid] == own)."""

    def __init__(self, block, tid):
        self.block, self.tid = block, tid
        self.clock = np.full(block.n, block.base, np.int64)
        self.own = block.base + 1
        self.clock[tid] = self.own
        self.barriers = 0

    def tick(self):
        self.own += 1
        self.clock[self.tid] = self.own


def _thread():
    """The calling simulator thread's clock, made at its first use."""
    current = threading.current_thread()
    state = getattr(current, "_race_clock", None)
    if state is None:
        manager = current._manager
        with _lock:
            block = getattr(manager, "_race_block", None)
            if block is None:
                block = manager._race_block = _Block(manager)
        state = current._race_clock = _Thread(block, current.thread_id)
    return state


def _syncthreads(original):
    def syncthreads(self):
        if not _checking:
            return original(self)
        me = _thread()
        block = me.block
        block.posted[me.tid] = me.own
        original(self)
        me.barriers += 1
        with block.lock:      # the first thread out takes the barrier's snapshot
            if block.generation < me.barriers:
                block.snapshot, block.generation = block.posted.copy(), me.barriers
            snapshot = block.snapshot
        me.clock[:] = snapshot
        me.tick()
    return syncthreads


def _named_barrier(original):
    def wait_named(barrier, threads):
        if not _checking:
            return original(barrier, threads)
        me = _thread()
        joined = me.block.join(("named", int(barrier), int(threads)))
        with me.block.lock:
            np.maximum(joined, me.clock, out=joined)
        original(barrier, threads)
        with me.block.lock:
            np.maximum(me.clock, joined, out=me.clock)
        me.tick()
    return wait_named


def _mbarrier_release(original, barrier_key):
    def update(bars, index, arrivals, tx):
        if _checking:
            me = _thread()
            joined = me.block.join(("mbarrier", barrier_key(bars, index)))
            with me.block.lock:
                np.maximum(joined, me.clock, out=joined)
            me.tick()
        return original(_unwrapped(bars), index, arrivals, tx)
    return update


def _mbarrier_acquire(original, barrier_key):
    def try_wait(bars, index, parity):
        done = original(_unwrapped(bars), index, parity)
        if done and _checking:
            me = _thread()
            joined = me.block.join(("mbarrier", barrier_key(bars, index)))
            with me.block.lock:
                np.maximum(me.clock, joined, out=me.clock)
        return done
    return try_wait


# ----------------------------------------------------------------------------------
# shared arrays and their stamps

class _Allocation:
    """The stamps of one shared allocation, per granule (an element of a static array,
    2 bytes of the dynamic buffer)."""

    def __init__(self, name, site, shape, granules, threads, dynamic):
        self.name, self.site, self.shape, self.dynamic = name, site, shape, dynamic
        self.writes = np.zeros(granules, np.int64)    # the last write: epoch, atomic, thread
        self.plain = np.zeros(granules, np.int64)     # the last write that was no atomic
        self.reads = np.zeros((granules, threads), np.int64)     # each thread's last
        self.atomics = None      # each thread's last atomic, made at the first

    def element(self, granule):
        if self.dynamic:
            return f"byte {_DYNAMIC_GRANULE * granule}"
        index = np.unravel_index(granule, self.shape)
        return "[" + ", ".join(str(int(i)) for i in index) + "]"

    def race(self, me, granule, other, what):
        block = me.block
        raise RaceError(
            f"{block.kernel}: shared array {self.name} ({self.site}), element "
            f"{self.element(granule)}: {block.thread_name(me.tid)} {what} "
            f"{block.thread_name(other)} with no barrier between (blockIdx "
            f"{tuple(threading.current_thread().blockIdx)})")

    def check_written(self, me, granules, verb):
        """Every last write of these granules (each thread's atomics among them) ordered
        before me, a plain access."""
        stamps = self.writes[granules]
        late = (stamps >> _SHIFT) > me.clock[stamps & _TID_MASK]
        if late.any():
            at = late.argmax()
            stamp = int(stamps[at])
            kind = "an atomic" if stamp & _ATOMIC else "a write"
            self.race(me, int(granules[at]), stamp & _TID_MASK, f"{verb} it after {kind} by")
        if self.atomics is not None:     # the stamp holds the latest atomic only
            flagged = granules[(stamps & _ATOMIC) != 0]
            if flagged.size:
                late = self.atomics[flagged] > me.clock
                if late.any():
                    row, other = np.unravel_index(late.argmax(), late.shape)
                    self.race(me, int(flagged[row]), int(other), f"{verb} it after an atomic by")

    def check_read(self, me, granules, verb):
        late = self.reads[granules] > me.clock
        if late.any():
            row, other = np.unravel_index(late.argmax(), late.shape)
            self.race(me, int(granules[row]), int(other), f"{verb} it after a read by")

    def read(self, granules):
        me = _thread()
        self.check_written(me, granules, "reads")
        self.reads[granules, me.tid] = me.own

    def write(self, granules):
        me = _thread()
        self.check_written(me, granules, "writes")
        self.check_read(me, granules, "writes")
        self.writes[granules] = self.plain[granules] = me.own << _SHIFT | me.tid

    # one granule, the kernels' usual access: the same checks in scalars (most of the
    # check's time is here), the arrays' path when one may fail, for its message

    def _written_late(self, me, granule):
        stamp = int(self.writes[granule])
        return ((stamp >> _SHIFT) > me.clock[stamp & _TID_MASK]
                or stamp & _ATOMIC and self.atomics is not None)

    def read_one(self, granule):
        me = _thread()
        if self._written_late(me, granule):
            self.check_written(me, np.array([granule]), "reads")
        self.reads[granule, me.tid] = me.own

    def write_one(self, granule):
        me = _thread()
        if self._written_late(me, granule) or (self.reads[granule] > me.clock).any():
            self.check_written(me, np.array([granule]), "writes")
            self.check_read(me, np.array([granule]), "writes")
        self.writes[granule] = self.plain[granule] = me.own << _SHIFT | me.tid

    def atomic(self, granules):
        """An atomic: ordered after the plain writes and reads, not after other atomics."""
        me = _thread()
        stamps = self.plain[granules]
        late = (stamps >> _SHIFT) > me.clock[stamps & _TID_MASK]
        if late.any():
            at = late.argmax()
            self.race(me, int(granules[at]), int(stamps[at]) & _TID_MASK,
                      "adds atomically to it after a write by")
        self.check_read(me, granules, "adds atomically to")
        if self.atomics is None:
            with _lock:
                if self.atomics is None:
                    self.atomics = np.zeros_like(self.reads)
        self.atomics[granules, me.tid] = me.own
        self.writes[granules] = me.own << _SHIFT | _ATOMIC | me.tid


class CheckedArray:
    """A shared array under the check: `data` the NumPy array, `at` the first granule of
    each element (the same shape), `span` granules per element."""
    __slots__ = ("data", "at", "span", "allocation")

    def __init__(self, data, at, span, allocation):
        self.data, self.at, self.span, self.allocation = data, at, span, allocation

    def _granules(self, at):
        at = np.asarray(at).reshape(-1)
        if self.span > 1:
            at = (at[:, None] + np.arange(self.span)).reshape(-1)
        return at

    def __getitem__(self, key):
        at = self.at[key]
        if self.span == 1 and isinstance(at, np.integer):
            self.allocation.read_one(at)
            return self.data[key]
        value = self.data[key]
        if isinstance(value, np.ndarray) and np.may_share_memory(value, self.data):
            return CheckedArray(value, at, self.span, self.allocation)    # a view
        self.allocation.read(self._granules(at))
        return value

    def __setitem__(self, key, value):
        if isinstance(value, CheckedArray):
            value = value.read_all()
        at = self.at[key]
        if self.span == 1 and isinstance(at, np.integer):
            self.allocation.write_one(at)
        else:
            self.allocation.write(self._granules(at))
        self.data[key] = value

    def read_all(self):
        self.allocation.read(self._granules(self.at))
        return self.data

    def reshape(self, *shape):
        return CheckedArray(self.data.reshape(*shape), self.at.reshape(*shape), self.span,
                            self.allocation)

    def __array__(self, dtype=None, copy=None):
        data = self.read_all()
        return data if dtype is None else data.astype(dtype)

    def __len__(self):
        return len(self.data)

    def __getattr__(self, name):        # shape, dtype, itemsize, __array_interface__, ...
        return getattr(self.data, name)

    def __repr__(self):
        return f"CheckedArray({self.allocation.name}, {self.data!r})"


def _unwrapped(arr):
    return arr.data if isinstance(arr, CheckedArray) else arr


def _array_name(site):
    """The name a kernel gives the array it allocates on this line (`name = ...`)."""
    match = re.match(r"\s*(\w+)\s*=", linecache.getline(*site))
    return match.group(1) if match else "(unnamed)"


def _shared_array(self, shape, dtype, alignment=None):
    """FakeCUDAShared.array, locked, and wrapped for the check when it is on.

    The simulator looks the calling line up in a dict and, when absent, creates and stores
    the array: an unlocked get-then-create. Two threads of a block that both miss before
    either stores get different arrays, so one thread's shared writes are never seen by
    the others and it reads uninitialised memory. A GIL switch inside that window is rare,
    so this shows under load (tests/test_kernels_attention.py's pipeline test returned
    ~1e12, issue 13); with a 1 ms sleep forced into the window, 19 launches in 20 of a
    64-thread kernel went wrong, and none with this lock. Upstream fixed the same kind of
    race in the simulator's module swapping (NVIDIA/numba-cuda PR 690); shared arrays are
    still unlocked there. This replacement holds a lock from the lookup to the store. It
    keys the allocation by the caller's (file, line) as the original does, read from the
    caller's frame instead of a formatted stack (which also saves the simulator time)."""
    from numba.cuda import types
    from numba.cuda.np import numpy_support

    if alignment is not None:
        raise RuntimeError("Array alignment is not supported in cudasim")
    if isinstance(dtype, types.Type):
        dtype = numpy_support.as_dtype(dtype)
    dtype = np.dtype(dtype)
    caller = sys._getframe(1)
    site = (caller.f_code.co_filename, caller.f_lineno)
    me = _thread() if _checking else None
    if shape == 0:      # dynamic shared memory: one buffer for every such call
        count = self._dynshared_size // dtype.itemsize
        arr = np.frombuffer(self._dynshared.data, dtype=dtype, count=count)
        if not _checking:
            return arr
        if dtype.itemsize % _DYNAMIC_GRANULE:
            raise RaceError(f"the race check tracks dynamic shared memory in "
                            f"{_DYNAMIC_GRANULE}-byte granules; a {dtype} view at "
                            f"{site[0]}:{site[1]} is narrower")
        span = dtype.itemsize // _DYNAMIC_GRANULE
        key, granules, array_shape = "dynamic", self._dynshared_size // _DYNAMIC_GRANULE, None
    with _lock:
        if shape != 0:
            arr = self._allocations.get(site)
            if arr is None:
                arr = self._allocations[site] = np.empty(shape, dtype)
            if not _checking:
                return arr
            span, key, granules, array_shape = 1, site, arr.size, arr.shape
        checks = self.__dict__.setdefault("_race_allocations", {})
        allocation = checks.get(key)
        if allocation is None:
            threads = me.block.n
            name = _array_name(site) if shape != 0 else "dynamic shared memory"
            allocation = checks[key] = _Allocation(
                name, f"{site[0]}:{site[1]}", array_shape, granules, threads, shape == 0)
    at = np.arange(arr.size, dtype=np.int64).reshape(arr.shape) * span
    return CheckedArray(arr, at, span, allocation)


# ----------------------------------------------------------------------------------
# installing it

def _atomic(original):
    def op(self, array, index, *args):
        if isinstance(array, CheckedArray):
            array.allocation.atomic(array._granules(array.at[index]))
            array = array.data
        return original(self, array, index, *args)
    return op


def _compare_and_swap(original):
    def compare_and_swap(self, array, old, val):
        if isinstance(array, CheckedArray):
            array.allocation.atomic(array._granules(array.at[(0,) * array.data.ndim]))
            array = array.data
        return original(self, array, old, val)
    return compare_and_swap


def install():
    """Replaces the simulator's shared-array allocation, and hooks its barriers, its
    atomics and the kernels' mbarrier and named-barrier twins for the check (off until
    ``checking()``). Fails loudly if the simulator or the twins are not what it hooks."""
    import importlib

    from numba.cuda.simulator import kernel, kernelapi

    kernelapi.FakeCUDAShared.array = _shared_array
    kernel.BlockThread.syncthreads = _syncthreads(kernel.BlockThread.syncthreads)
    atomics = kernelapi.FakeCUDAAtomic
    for name in ("add", "sub", "and_", "or_", "xor", "inc", "dec", "exch", "max", "min",
                 "nanmax", "nanmin", "cas"):
        setattr(atomics, name, _atomic(getattr(atomics, name)))
    atomics.compare_and_swap = _compare_and_swap(atomics.compare_and_swap)

    twins = importlib.import_module(TWINS)
    missing = [name for name in ("_wait_named", "_barrier_update", "_barrier_key",
                                 "mbarrier_try_wait") if not hasattr(twins, name)]
    if missing:
        raise ImportError(f"simulator_racecheck: {TWINS} has no {', '.join(missing)}: point "
                          "TWINS at the module of the mbarrier and named-barrier twins")
    twins._wait_named = _named_barrier(twins._wait_named)
    twins._barrier_update = _mbarrier_release(twins._barrier_update, twins._barrier_key)
    # a device function: the object the kernels imported, so its Python function is
    # replaced in place
    twins.mbarrier_try_wait.fn = _mbarrier_acquire(twins.mbarrier_try_wait.fn,
                                                   twins._barrier_key)
