"""s18 decode: transformers' generate rows of tools/bench.py's generate section alone (the
same cases, prompts and timing: benchmarks.generate's helpers), printed as they come."""
import sys

import numpy as np

sys.path.insert(0, "tools")
from benchmarks.generate import (CASES, TTFT_PROMPT, _timed, _transformers_generate,  # noqa
                                 _transformers_model)
from microgpt import get_config  # noqa: E402

rng = np.random.default_rng(0)
for name, batch, prompt in CASES:
    cfg = get_config(name)
    hf = _transformers_model(cfg, "bf16")
    prompts = [list(rng.integers(0, cfg.vocab_size, prompt)) for _ in range(batch)]
    rate = batch * 200 / _timed(lambda: _transformers_generate(hf, prompts, 200))
    print(f"  transformers {name} batch {batch}: {rate:,.1f} tok/s", flush=True)
cfg = get_config("andrea-120m")
prompt = [list(rng.integers(0, cfg.vocab_size, TTFT_PROMPT))]
ms = 1e3 * _timed(lambda: _transformers_generate(_transformers_model(cfg, "bf16"), prompt, 1),
                  repeats=5)
print(f"  transformers time to the first token, {TTFT_PROMPT}-token prompt: {ms:.2f} ms",
      flush=True)
