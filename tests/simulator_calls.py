"""The simulator's cost of a device-function call, cut: one scan of a module's globals.

numba's CUDA simulator (numba-cuda 0.30, simulator/kernelapi.py, swapped_cuda_module)
puts its fake ``cuda`` module into a function's module globals around every call of a
kernel or device function, and on each first entrance into a module scans all of that
module's globals for the real one. A kernel's own module stays swapped for its launch, but
the device functions of other modules (the atoms' twins, common's reductions, the layouts)
are entered afresh by every call of every thread, and each entrance scanned: ~8% of a
tensor-core kernel test's CPU time. Which names of a module hold numba.cuda does not
change once it is imported, so here they are found once per module; the swap, its lock
and its reference count are the simulator's own.
"""
from contextlib import contextmanager

_cuda_names = {}    # id(module globals) -> the names bound to numba.cuda there


def install():
    from numba.cuda.simulator import kernel, kernelapi

    if not hasattr(kernelapi, "_swap_refcount") or not hasattr(kernel, "swapped_cuda_module"):
        raise ImportError("simulator_calls: numba's simulator no longer swaps modules as "
                          "this file expects (kernelapi._swap_refcount): drop install()")

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
