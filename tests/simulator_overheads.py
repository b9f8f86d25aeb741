"""Two overheads of numba's CUDA simulator (numba-cuda 0.30), cut for the test suite.

The simulator runs each thread of a block as a Python thread. Its semantics stay as they
are; what changes is what it spends around them:

- The block's scheduler (simulator/kernel.py, BlockManager.run) polls its threads in a
  loop that never sleeps: is every live one blocked in syncthreads()? has one finished?
  That loop holds the interpreter as often as the threads doing the work, about half of a
  model test's CPU time. Here the threads report instead, under one condition variable:
  the last to arrive at a barrier releases it (the threads that have returned do not
  count, as there), and the scheduler sleeps until every thread has finished or one has
  raised, whose exception it raises after aborting the others, as the original does.
- A call of a kernel or device function puts the fake ``cuda`` module into its module's
  globals (kernelapi.swapped_cuda_module), and on each first entrance into a module scans
  all of that module's globals for the real one. The device functions of other modules
  than the kernel's (the atoms' twins, common's reductions) are entered afresh by every
  call of every thread, each entrance a scan: ~8% of a tensor-core kernel test's CPU time.
  Which names of a module hold numba.cuda does not change once it is imported: they are
  found once per module; the swap, its lock and its reference count are the simulator's.

install() must run before simulator_racecheck's, which wraps the syncthreads set here.
"""
import sys
import threading
from contextlib import contextmanager

import numpy as np

_cuda_names = {}    # id(module globals) -> the names bound to numba.cuda there


def _run_block(manager, grid_point, *args):
    """BlockManager.run: start the block's threads, wait for them without polling."""
    from numba.cuda.simulator.kernel import BlockThread

    manager._cond = cond = threading.Condition()
    manager._total = int(np.prod(manager._block_dim))
    manager._arrived = manager._finished = manager._generation = 0
    error = []

    def target():
        try:
            manager._f(*args)
        except Exception as e:
            # the simulator's own message (BlockThread.run), kept here for the scheduler
            me = threading.current_thread()
            where = f"tid={list(me.threadIdx)} ctaid={list(me.blockIdx)}"
            with cond:
                error.append((type(e)(f"{where}: {e}" if str(e) else where),
                              sys.exc_info()[2]))
            raise
        finally:
            with cond:
                manager._finished += 1
                _release_if_complete(manager)
                cond.notify_all()

    threads = [BlockThread(target, manager, grid_point, block_point, manager._debug)
               for block_point in np.ndindex(*manager._block_dim)]
    for thread in threads:
        thread.start()
    with cond:
        while manager._finished < manager._total and not error:
            cond.wait()
        if error:
            # the others stop at their next barrier, as the simulator's scheduler has them
            for thread in threads:
                thread.abort = True
            cond.notify_all()
            raise error[0][0].with_traceback(error[0][1])
    for thread in threads:
        thread.join()


def _release_if_complete(manager):
    """Under the condition: the barrier is complete when every thread still running has
    arrived at it."""
    if manager._arrived and manager._arrived + manager._finished == manager._total:
        manager._arrived = 0
        manager._generation += 1


def _syncthreads(thread):
    if thread.abort:
        raise RuntimeError("abort flag set on syncthreads call")
    manager = thread._manager
    with manager._cond:
        generation = manager._generation
        manager._arrived += 1
        _release_if_complete(manager)
        if manager._generation != generation:
            manager._cond.notify_all()
        while manager._generation == generation and not thread.abort:
            manager._cond.wait()
    if thread.abort:
        raise RuntimeError("abort flag set on syncthreads clear")


def install():
    from numba.cuda.simulator import kernel, kernelapi

    needed = (hasattr(kernel, "BlockManager") and hasattr(kernel, "swapped_cuda_module")
              and hasattr(kernelapi, "_swap_refcount"))
    if not needed:
        raise ImportError("simulator_overheads: numba's simulator is not the one this file "
                          "patches (numba-cuda 0.30's simulator/kernel.py): drop install()")

    @contextmanager
    def swapped_cuda_module(fn, fake_cuda_module):
        from numba import cuda

        globs = fn.__globals__
        gid = id(globs)
        with kernelapi._locks_register_lock:
            lock = kernelapi._globals_locks[gid]
        with lock:
            if kernelapi._swap_refcount[gid] == 0:
                names = _cuda_names.get(gid)
                if names is None:
                    names = _cuda_names[gid] = [k for k, v in globs.items() if v is cuda]
                kernelapi._swap_orig[gid] = {k: globs[k] for k in names}
                for k in names:
                    globs[k] = fake_cuda_module
            kernelapi._swap_refcount[gid] += 1
        try:
            yield
        finally:
            with lock:
                kernelapi._swap_refcount[gid] -= 1
                if kernelapi._swap_refcount[gid] == 0:
                    globs.update(kernelapi._swap_orig.pop(gid))
                    del kernelapi._swap_refcount[gid]

    kernel.swapped_cuda_module = swapped_cuda_module
    kernel.BlockManager.run = _run_block
    kernel.BlockThread.syncthreads = _syncthreads
