"""The device: what the hardware is and allows, one place for every kernel (an H200,
compute capability 9.0, or numba's CUDA simulator standing in for it).

The limits a launch must respect (threads, shared memory with and without the driver's
opt-in), the machine's width (SMs, warps, warpgroups), the shapes its instructions work
in (the mma tile, the 16-byte chunk that cp.async, ldmatrix and the vector accesses move)
and the swizzle modes of its shared memory. ``allow_dynamic_shared`` is the driver opt-in
for more than SHARED_LIMIT bytes of dynamic shared memory.
"""
from numba import config, cuda

SIMULATOR = bool(config.ENABLE_CUDASIM)

WARP = 32
MAX_THREADS = 1024     # a block's
SM_THREADS = 2048      # resident on one SM
WARPGROUP = 128        # the four warps of a wgmma
SMS = 132              # streaming multiprocessors of an H200
# static shared memory a block may declare, and dynamic shared memory it may have with
# the driver's opt-in attribute (allow_dynamic_shared)
SHARED_LIMIT = 48 * 1024
DYNAMIC_SHARED_LIMIT = 227 * 1024

CHUNK = 8              # bf16 elements in one 16-byte cp.async / ldmatrix row
GROUP = 4              # elements of one vector access: 16 bytes of float32, 8 of bf16
MMA_M, MMA_N, MMA_K = 16, 8, 16
# cp.async and ldmatrix move 16-byte rows: shared arrays they touch are declared with
# alignment=SHARED_ALIGN (the simulator refuses any alignment, and needs none)
SHARED_ALIGN = None if SIMULATOR else 16
SWIZZLE_BYTES = 1024   # one whole swizzle pattern: where a wgmma operand starts


def swizzle(chunks):
    """(rows_per_line, phases) of the XOR swizzle of rows of `chunks` 16-byte chunks (1, 2,
    4 or 8 and more: rows of 16 to 128 bytes and wider): chunk c of row r lies at chunk
    c ^ (r // rows_per_line % phases) of its row. rows_per_line rows share one 128-byte
    line of banks; the pattern is the hardware's 32-, 64- and 128-byte swizzle modes (what
    the bulk tensor copies write and wgmma reads), and ldmatrix's eight rows land in
    eight distinct bank groups. The one definition of it: the shared tiles, the wgmma
    epilogue and the bulk copies' twins all take it from here."""
    return max(1, 8 // chunks), min(chunks, 8)


def check_block(what, threads, shared_bytes=0, shared_limit=SHARED_LIMIT):
    """A kernel's block (threads, bytes of shared memory) within the device's limits, or a
    ValueError that names `what` (a tile) and the limit."""
    if threads > MAX_THREADS:
        raise ValueError(f"{what}: {threads} threads per block, more than {MAX_THREADS}")
    if shared_bytes > shared_limit:
        raise ValueError(f"{what}: {shared_bytes} bytes of shared memory, more than "
                         f"{shared_limit}")


_opted_in = set()


def allow_dynamic_shared(kernel, signature, size):
    """More than SHARED_LIMIT bytes of dynamic shared memory needs the driver's opt-in
    attribute on the compiled kernel, which numba-cuda has no API for: set it through the
    driver bindings, once per overload (signature: a view compiles one of its own) and
    device, on the kernel (context-independent, what numba-cuda launches) and on its
    function in this context (what the launch resolves it to). -> whether it is set (or
    not needed): False while kernels.ahead records a step, which compiles nothing, so a
    caller that remembers the opt-in remembers none then."""
    if SIMULATOR or size <= SHARED_LIMIT:
        return True
    from numba.cuda.cudadrv.driver import binding, driver

    device = cuda.get_current_device().id
    key = (id(kernel), signature, device)
    if key not in _opted_in:           # (looking up the overload costs more than a launch:
        compiled = kernel.compile(signature)                                  # once only)
        if compiled is None:           # kernels.ahead's recording: nothing will launch
            return False
        attribute = (binding.CUfunction_attribute
                     .CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)
        handle = compiled._codelibrary.get_cufunc().handle
        driver.cuKernelSetAttribute(attribute, size, handle, device)
        driver.cuFuncSetAttribute(driver.cuKernelGetFunction(handle), attribute, size)
        _opted_in.add(key)
    return True
