"""The driver's launch of the persistent GEMM's kernels (``gemm.persistent``): in
clusters of blocks, and loaded whole-program by the driver's JIT, neither of which
numba-cuda's own launch does (docs/gemm-bf16.md, "A copying warpgroup and ping-pong")."""
import sys

from numba import cuda

from ..device import SIMULATOR, SMS, allow_dynamic_shared

_loaded = {}      # (kernel, signature, cluster, whole, device) -> (overload, kernel, clusters)


def _load(kernel, signature, cluster, threads, shared_bytes, whole):
    """The overload a driver launch runs, the cuda.core kernel to launch (numba's own load
    of it, or, whole, its PTX loaded by the driver's JIT) and the most clusters of it that
    the device holds at once (an SM's clusters must lie within one of its GPCs, whose SMs
    need not come in whole clusters): a persistent grid of more would leave the rest of
    them to start when the first have ended, and take twice as long.

    whole: numba-cuda links its kernels through nvJitLink, which assembles the PTX as
    relocatable code, and ptxas then ignores setmaxnreg ("to maintain compatibility across
    compilation units"); the driver's JIT of the same PTX compiles the whole program, which
    honours it (the copier's registers handed to the computing warpgroups)."""
    # (per device: the JIT's kernel takes its shared-memory opt-in per device)
    key = (id(kernel), signature, cluster, whole, cuda.get_current_device().id)
    if key not in _loaded:              # (looking up the overload costs more than a launch)
        from numba.cuda.cudadrv.driver import binding, driver

        compiled = kernel.compile(signature)
        if compiled is None:            # kernels.ahead's recording: nothing will launch
            return None, None, 1
        launched = _jit_whole(kernel, signature, compiled, shared_bytes) if whole else None
        if launched is None:
            launched = compiled._codelibrary.get_cufunc().kernel
        fits = SMS
        if cluster > 1:
            function = driver.cuKernelGetFunction(launched.handle)
            shape = binding.CUlaunchAttribute()
            shape.id = binding.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
            shape.value.clusterDim.x, shape.value.clusterDim.y, shape.value.clusterDim.z = (
                cluster, 1, 1)
            config = binding.CUlaunchConfig()
            config.gridDimX, config.gridDimY, config.gridDimZ = SMS // cluster * cluster, 1, 1
            config.blockDimX, config.blockDimY, config.blockDimZ = threads, 1, 1
            config.sharedMemBytes = shared_bytes
            config.attrs, config.numAttrs = [shape], 1
            fits = driver.cuOccupancyMaxActiveClusters(function, config)
            if fits < 1:
                raise RuntimeError(f"no cluster of {cluster} blocks of {threads} threads and "
                                   f"{shared_bytes} bytes of shared memory fits this device")
        _loaded[key] = compiled, launched, fits
    return _loaded[key]


def _jit_whole(kernel, signature, compiled, shared_bytes):
    """The overload's PTX through the driver's JIT (cuLibraryLoadData: one module, compiled
    whole), with the opt-in to its dynamic shared memory. NVVM may write a newer PTX ISA
    than the driver reads: its version line is then the driver's own (PTX 9.x is CUDA 13.x);
    the instructions used are sm_90a's, older than either. If the JIT refuses it, None,
    said in one line: the kernel then runs as numba links it, correct but without the
    copier's registers moved (slower)."""
    import re

    from cuda.core import ObjectCode
    from numba.cuda.cudadrv.driver import binding, driver

    device = cuda.get_current_device()
    ptx = compiled.inspect_asm(None)           # (the cc numba compiled for: sm_90a)
    entry = re.search(r"\.entry\s+(\w+)\(", ptx).group(1)
    major, minor = driver.get_version()
    ptx = re.sub(r"^\.version \d+\.\d+", f".version {major - 4}.{minor}", ptx, count=1,
                 flags=re.M)
    try:
        launched = ObjectCode.from_ptx(ptx.encode()).get_kernel(entry)   # (a str is a path)
    except Exception as error:                 # (cuda.core's CUDAError)
        print(f"gemm.persistent: the driver's JIT refused {kernel.py_func.__name__} "
              f"({str(error).splitlines()[0]}); running numba's own build of it (setmaxnreg "
              "ignored: slower)", file=sys.stderr)
        allow_dynamic_shared(kernel, signature, shared_bytes)
        return None
    attribute = binding.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
    driver.cuKernelSetAttribute(attribute, shared_bytes, launched.handle, device.id)
    driver.cuFuncSetAttribute(driver.cuKernelGetFunction(launched.handle), attribute,
                              shared_bytes)
    return launched


def cluster_blocks(kernel, signature, units, cluster, threads, shared_bytes, whole=False):
    """Blocks of a clustered launch over `units` of the walk: as many clusters as the
    device holds at once, or one a unit."""
    fits = _load(kernel, signature, cluster, threads, shared_bytes, whole)[2]
    return min(units, fits) * cluster


def launch_by_driver(kernel, signature, blocks, cluster, threads, shared_bytes, stream,
                     args, whole=False):
    """kernel[blocks, threads, stream, shared_bytes](*args), in clusters of `cluster`
    blocks along x (blocks a count then; without clusters also a grid's shape), and
    (whole) as the driver's JIT compiles its PTX (_load): numba-cuda's
    launch has neither a cluster shape nor that load, cuda.core's (which numba-cuda
    launches through) has; the arguments are marshalled as numba-cuda's launch does."""
    if SIMULATOR:
        raise ValueError(f"clusters of {cluster} blocks: the simulator runs its blocks one "
                         "after another, so none could wait on another")
    from cuda.core import LaunchConfig, launch
    from numba.cuda.cudadrv import driver

    compiled, launched, _ = _load(kernel, signature, cluster, threads, shared_bytes, whole)
    if compiled is None:
        return
    stream = driver._to_core_stream(stream)
    marshalled, written_back = [], []
    for ty, value in zip(compiled.argument_types, args):
        compiled._prepare_args(ty, value, stream, written_back, marshalled)
    config = LaunchConfig(grid=blocks // cluster if cluster > 1 else blocks,
                          cluster=cluster if cluster > 1 else None,
                          block=threads, shmem_size=shared_bytes)
    launch(stream, config, launched, *marshalled)
