"""Whether a numba kernel's PTX loaded by the driver's JIT (a whole-program compile, which
honours setmaxnreg; numba-cuda links through nvJitLink, relocatable, which ignores it) runs
as numba's own load does: the persistent GEMM on andrea-120m's MLP up forward and W_O
forward, the same bits and the same time?

python3 jit_probe.py
"""
import os
import re

import ml_dtypes
import numpy as np
from numba import cuda
from numba.cuda.cudadrv.driver import binding, driver

from microgpt.kernels.gemm import bf16 as gemm_bf16, persistent
from microgpt.kernels.gemm.tuning import PERSISTENT_TILE
from microgpt.kernels.layouts.tensor_maps import tensor_map

ATTR = binding.CUfunction_attribute


def attributes(function):
    return {name: driver.cuFuncGetAttribute(getattr(ATTR, f"CU_FUNC_ATTRIBUTE_{name}"), function)
            for name in ("NUM_REGS", "LOCAL_SIZE_BYTES")}


def load(ObjectCode, ptx, entry):
    """The kernel through the driver's JIT; a PTX newer than the driver takes the driver's
    own ISA version (NVVM's may be ahead of it)."""
    try:
        return ObjectCode.from_ptx(ptx.encode()).get_kernel(entry)
    except Exception as error:
        version = driver.get_version()
        print("driver JIT refused:", str(error).splitlines()[0][:200], "driver", version,
              flush=True)
        ptx = re.sub(r"^\.version \d+\.\d+", f".version {version[0] - 4}.{version[1]}",
                     ptx, count=1, flags=re.M)
        return ObjectCode.from_ptx(ptx.encode()).get_kernel(entry)


def main():
    from cuda.core import LaunchConfig, ObjectCode, launch

    rng = np.random.default_rng(0)
    device = cuda.get_current_device().id
    tile = PERSISTENT_TILE
    for name, M, N, K, epilogue in (("MLP up forward", 16384, 3072, 768, "bf16"),
                                    ("W_O forward", 16384, 768, 768, "float32")):
        a = cuda.to_device(rng.standard_normal((M, K), np.float32)
                           .astype(ml_dtypes.bfloat16).view(np.uint16))
        b = cuda.to_device(rng.standard_normal((K, N), np.float32)
                           .astype(ml_dtypes.bfloat16).view(np.uint16))
        dtype = np.uint16 if epilogue == "bf16" else np.float32
        out_numba, out_jit = (cuda.device_array((M, N), dtype) for _ in range(2))
        gemm_bf16.matmul_bf16(out_numba, a, b, tile=tile)
        cuda.synchronize()

        kernel = persistent.persistent_kernel(False, False, epilogue, tile, False)
        signature = persistent.signature(epilogue)
        compiled = kernel.compile(signature)
        ptx = kernel.inspect_asm(signature)
        entry = re.search(r"\.entry\s+(\w+)\(", ptx).group(1)
        if os.environ.get("OUT"):           # (for ptxas on the host, if the JIT refuses it)
            with open(os.path.join(os.environ["OUT"], f"jit_probe_{epilogue}.ptx"), "w") as f:
                f.write(ptx)
        jitted = load(ObjectCode, ptx, entry)
        attribute = ATTR.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        driver.cuKernelSetAttribute(attribute, tile.shared_bytes, jitted.handle, device)
        function = driver.cuKernelGetFunction(jitted.handle)
        driver.cuFuncSetAttribute(function, attribute, tile.shared_bytes)
        numba_function = driver.cuKernelGetFunction(compiled._codelibrary.get_cufunc().handle)
        print(name, "numba's load", attributes(numba_function), "driver JIT",
              attributes(function), flush=True)

        tiles_m, tiles_n = -(-M // tile.rows), -(-N // tile.cols)
        steps = -(-K // tile.depth)
        a_map = tensor_map(a, tile.rows, tile.depth)
        b_map = tensor_map(b, tile.depth, 64)
        out_map = tensor_map(out_jit, 64, 64 if epilogue == "bf16" else 32)
        bias = cuda.device_array(1, np.float32)
        args = (out_jit, a, b, bias, a_map, b_map, out_map, np.int32(tiles_m),
                np.int32(tiles_n), np.int32(1), np.int32(steps))
        stream = cuda.default_stream()
        core_stream = driver._to_core_stream(stream)
        marshalled, written_back = [], []
        for ty, value in zip(compiled.argument_types, args):
            compiled._prepare_args(ty, value, core_stream, written_back, marshalled)
        config = LaunchConfig(grid=persistent.blocks(tiles_m * tiles_n), block=tile.threads,
                              shmem_size=tile.shared_bytes)
        run_jit = lambda: launch(core_stream, config, jitted, *marshalled)
        run_numba = lambda: gemm_bf16.matmul_bf16(out_numba, a, b, tile=tile)
        run_jit()
        cuda.synchronize()
        same = np.array_equal(out_jit.copy_to_host(), out_numba.copy_to_host())
        print(name, "same bits:", same, flush=True)
        for label, fn in (("numba", run_numba), ("jit", run_jit), ("numba", run_numba),
                          ("jit", run_jit)):
            start, stop = cuda.event(), cuda.event()
            fn()
            start.record()
            for _ in range(20):
                fn()
            stop.record()
            stop.synchronize()
            print(f"  {name} {label}: {cuda.event_elapsed_time(start, stop) / 20:.4f} ms "
                  "(eager)", flush=True)


if __name__ == "__main__":
    main()
