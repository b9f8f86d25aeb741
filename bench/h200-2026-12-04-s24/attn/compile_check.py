"""Session 24 (attn): a wgmma backward pass's kernel for one tile compiled for sm_90a on
the CPU machine, as tests/test_compile.py compiles the listed ones (numba's PTX, then
nvJitLink with -verbose): its registers, stack bytes and whether ptxas serialized its
wgmma. For tiles check_tile refuses too (the question is whether they would spill).

python3 compile_check.py dq|dkdv D FIELDS   (FIELDS: a BackwardTile's, e.g. 1,64,4,2,1 or
2,64,8,1,1,1 for a donating producer warpgroup, compiled whole by ptxas) [SASS_FILE]"""
import os
import re
import shutil
import subprocess
import sys
import tempfile
import types

from numba import cuda
from numba.cuda import dispatcher

import nvidia
from cuda.bindings import nvjitlink
from microgpt.kernels.attention import hopper_backward as hb

dispatcher.get_current_device = lambda: types.SimpleNamespace(compute_capability=(9, 0, "a"))
kind, D = sys.argv[1], int(sys.argv[2])
f = [int(x) for x in sys.argv[3].split(",")]
tile = hb.BackwardTile(*f[:4], *map(bool, f[4:]))
kernel = (hb.dq_kernel if kind == "dq" else hb.dkdv_kernel)(D, tile)
signature = hb.DQ_SIGNATURE if kind == "dq" else hb.DKDV_SIGNATURE
ptx, _ = cuda.compile_ptx(kernel.py_func, signature, cc=(9, 0, "a"),
                          launch_bounds=kernel.targetoptions.get("launch_bounds"))
if getattr(kernel, "whole_program", False):
    # a donating tile: the toolkit's ptxas compiles it whole, as the driver's JIT does
    # (the PTX's version line its own, as test_compile's assemble_whole)
    release = re.search(r"release (\d+)\.(\d+)", subprocess.run(
        ["ptxas", "--version"], capture_output=True, text=True).stdout)
    ptx = re.sub(r"^\.version \d+\.\d+", f".version {int(release[1]) - 4}.{release[2]}",
                 ptx, count=1, flags=re.M)
    with tempfile.TemporaryDirectory() as folder:
        with open(os.path.join(folder, "k.ptx"), "w") as f:
            f.write(ptx)
        done = subprocess.run(["ptxas", "-arch=sm_90a", "-v", os.path.join(folder, "k.ptx"),
                               "-o", os.path.join(folder, "k.cubin")],
                              capture_output=True, text=True)
        cubin = open(os.path.join(folder, "k.cubin"), "rb").read()
    log = done.stdout + done.stderr
else:
    handle = nvjitlink.create(2, ["-arch=sm_90a", "-verbose"])
    data = ptx.encode()
    nvjitlink.add_data(handle, nvjitlink.InputType.PTX, data, len(data), "kernel.ptx")
    nvjitlink.complete(handle)
    log = bytearray(nvjitlink.get_info_log_size(handle))
    nvjitlink.get_info_log(handle, log)
    cubin = bytearray(nvjitlink.get_linked_cubin_size(handle))
    nvjitlink.get_linked_cubin(handle, cubin)
    nvjitlink.destroy(handle)
    log = log.decode(errors="replace")
print(kind, D, tuple(tile), "registers", re.findall(r"Used (\d+) registers", log),
      "setmaxnreg ignored" if "setmaxnreg ignored" in log else "",
      "stack", re.findall(r"(\d+) bytes stack", log),
      "serialized", "serialized" in log)

# the static SASS (nvdisasm, from the nvidia-cuda-nvdisasm wheel where installed): the
# kernel's instructions, and those of its opcodes that the step's integer work shows in
nvdisasm = shutil.which("nvdisasm") or os.path.join(os.path.dirname(nvidia.__path__[0]),
                                                   "nvidia", "cu13", "bin", "nvdisasm")
if os.path.exists(nvdisasm):
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(bytes(cubin))
        f.flush()
        sass = subprocess.run([nvdisasm, f.name], capture_output=True, text=True).stdout
    ops = re.findall(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)", sass)
    counts = {o: ops.count(o) for o in ("HGMMA", "LDS", "IMAD", "IADD3", "R2UR", "MUFU")}
    print("static SASS", len(ops), counts)
    if sys.argv[4:]:
        with open(sys.argv[4], "w") as f:
            f.write(sass)
