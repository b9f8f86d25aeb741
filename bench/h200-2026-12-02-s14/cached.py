"""Run a tool script with the kernel cache on (/tmp/mgcache/kernels): python cached.py SCRIPT ARGS."""
import runpy, sys
from microgpt.kernels import cache
cache.use("/tmp/mgcache/kernels")
sys.argv = sys.argv[1:]
sys.path.insert(0, __import__("os").path.dirname(sys.argv[0]))
runpy.run_path(sys.argv[0], run_name="__main__")
