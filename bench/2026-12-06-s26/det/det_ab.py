"""--deterministic's cost with session 26's changes and without them, in one process: the
captured bf16 step on the default backend, on a deterministic one as main has it, with
the split-K's add_parts on the step's stream instead of beside it (gemm.turns.BESIDE
off), with session 24's embedding backward (embedding_s24.py), with both (session 24's
deterministic step), and with every ordered product by parts on the atomics' tile
(tuning.ordered_by_parts always: andrea-120m's QKV and MLP dW, in turns as routed, then
add their parts beside the stream too), on batches of a token shard (or uniform / zipf tokens), the
steps cycling through 4 of them; the rounds alternate, each figure the best round's
(tools/benchmarks/captured_steps.py, as session 24's det_cost.py times them).

    [VARIANTS="name;name"] python3 det_ab.py CONFIG B T REPS ROUNDS VOCAB TOKENS

(VARIANTS split on ";": the names hold commas. Call B split them on "," and its
andrea-12m run, and the test job's warm-up, stopped at the first name: fixed after it.)
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "tools"))
sys.path.insert(0, HERE)
import embedding_s24  # noqa: E402
from benchmarks.captured_steps import best_of_rounds, built_step  # noqa: E402
from benchmarks.token_batches import batches, describe  # noqa: E402

from microgpt import cuda_backend, get_config  # noqa: E402
from microgpt.data import default_cache_dir  # noqa: E402
from microgpt.kernels import cache as kernel_cache  # noqa: E402
from microgpt.kernels.gemm import tuning, turns  # noqa: E402

CONFIG, B, T, REPS, ROUNDS, VOCAB = (sys.argv[1], *map(int, sys.argv[2:7]))
TOKENS = sys.argv[7]
INLINE = [(turns, "BESIDE", False)]
SESSION24_EMBEDDING = [(cuda_backend.CudaBackend, "encoder_backward",
                        cuda_backend._on_stream(embedding_s24.encoder_backward))]
# name -> (deterministic, the patches while the step is built)
VARIANTS = {"default": (False, ()),
            "deterministic": (True, ()),
            "deterministic, add_parts on the stream": (True, INLINE),
            "deterministic, session 24's embedding backward": (True, SESSION24_EMBEDDING),
            "deterministic as session 24 (both)": (True, INLINE + SESSION24_EMBEDDING),
            "deterministic, every ordered product by parts": (
                True, [(tuning, "ordered_by_parts", lambda *args: True)])}
if os.environ.get("VARIANTS"):          # (names: the keys above, default first)
    VARIANTS = {name: VARIANTS[name] for name in os.environ["VARIANTS"].split(";")}
kernel_cache.use(default_cache_dir() / "kernels")

data = batches(TOKENS, VOCAB, 4, B, T)
print(f"tokens {TOKENS}, vocab {VOCAB}: " + "; ".join(describe(x) for x, _ in data),
      flush=True)
cfg = get_config(CONFIG, vocab_size=VOCAB)
steps = {name: built_step(cfg, B, T, data, deterministic=deterministic, patches=patches,
                          say=lambda line, name=name: print(f"{name}: {line}", flush=True))
         for name, (deterministic, patches) in VARIANTS.items()}
best = best_of_rounds(steps, data, REPS, ROUNDS)
print(f"{CONFIG} vocab {VOCAB}, B {B} x {T}, bf16 captured, {TOKENS} tokens "
      f"({ROUNDS} rounds of {REPS}):", flush=True)
for name, seconds_a_step in best.items():
    print(f"  {name}: {seconds_a_step * 1e3:.3f} ms, "
          f"{100 * (seconds_a_step / best['default'] - 1):+.2f}%", flush=True)
