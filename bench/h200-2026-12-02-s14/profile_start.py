"""The trainer's start-up under cProfile, stopped at its first step's log line (main thread)."""
import cProfile, io, pstats, re, sys, time
T0 = time.perf_counter()
FIRST = re.compile(r"^\s*step +1/")
class Stop(BaseException):
    pass
class Watch(io.TextIOBase):
    def __init__(self, out):
        self.out = out
    def write(self, text):
        self.out.write(text)
        if FIRST.match(text):
            raise Stop
        return len(text)
    def flush(self):
        self.out.flush()
from microgpt.train import main
sys.stdout = Watch(sys.__stdout__)
prof = cProfile.Profile()
prof.enable()
try:
    main(sys.argv[1:])
except Stop:
    pass
prof.disable()
sys.stdout = sys.__stdout__
print(f"to the first step's line: {time.perf_counter() - T0:.2f} s")
pstats.Stats(prof).sort_stats("cumulative").print_stats(50)
pstats.Stats(prof).sort_stats("tottime").print_stats(25)
