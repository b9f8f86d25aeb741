"""tokens/s of microgpt.generate (a captured decoding step, sampling on the device) and its
time to the first token, beside Hugging Face transformers' generate on a GPT2LMHeadModel
of the same geometry (random weights, the same precision) when transformers is
importable."""

import functools
import time

import numpy as np

# (config, batch, prompt tokens): the cases of the targets (docs/generation.md)
CASES = [("andrea-120m", 1, 16), ("andrea-120m", 16, 16), ("andrea-12m", 1, 16)]
TTFT_PROMPT = 512
SAMPLED = dict(temperature=0.8, top_k=40)       # microgpt.sample's defaults


def _timed(fn, repeats=3):
    """The fastest of a few calls of fn (after one that warms it up), in seconds."""
    fn()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


@functools.cache
def _transformers_model(cfg, precision):
    """A GPT2LMHeadModel of cfg's geometry on the GPU (random weights), or None."""
    try:
        import torch
        from transformers import GPT2Config, GPT2LMHeadModel
    except ImportError:
        return None
    hf = GPT2LMHeadModel(GPT2Config(vocab_size=cfg.vocab_size, n_positions=cfg.context,
                                    n_embd=cfg.d_model, n_layer=cfg.n_layer,
                                    n_head=cfg.n_head))
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    return hf.to("cuda", dtype).eval()


def _transformers_generate(hf, prompts, n_tokens):
    import torch

    ids = torch.tensor(prompts, device="cuda")
    with torch.no_grad():
        hf.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n_tokens,
                    min_new_tokens=n_tokens, do_sample=False, use_cache=True,
                    pad_token_id=0)
    torch.cuda.synchronize()


def bench_generate(device, tokens, transformers=True):
    """Per case: microgpt's tokens/s (all sequences' new tokens over the whole call, the
    prefill included) greedy and sampled, and transformers' greedy beside it (when
    transformers is importable and asked for); and the time to the first token of a
    TTFT_PROMPT-token prompt at andrea-120m (the prefill and the first step). A decoder is
    kept across calls, as a server keeps one."""
    from microgpt import GPT, get_config
    from microgpt.generate import Decoder, Sampling, generate

    backend = "cuda" if device == "cuda" else "numpy"
    precision = "bf16" if device == "cuda" else "fp32"
    cases = CASES if device == "cuda" else [("andrea-12m", 1, 16)]
    rows, models = [], {}
    rng = np.random.default_rng(0)
    for name, batch, prompt in cases:
        cfg = get_config(name)
        if name not in models:
            models[name] = GPT(cfg, backend=backend, precision=precision)
        model = models[name]
        prompts = [list(rng.integers(0, cfg.vocab_size, prompt)) for _ in range(batch)]
        decoder = Decoder(model, batch)
        row = dict(config=name, batch=batch, prompt=prompt, tokens=tokens,
                   precision=precision)
        for label, sampling in (("greedy", Sampling(temperature=0.0, top_k=0)),
                                ("sampled", Sampling(**SAMPLED))):
            seconds = _timed(lambda: generate(model, prompts, tokens, sampling,
                                              decoder=decoder))
            row[label] = batch * tokens / seconds
        hf = _transformers_model(cfg, precision) if device == "cuda" and transformers else None
        if hf is not None:
            row["transformers"] = batch * tokens / _timed(
                lambda: _transformers_generate(hf, prompts, tokens))
        rows.append(row)
        print(f"  {name:12s} batch {batch:2d}: greedy {row['greedy']:9.1f} tok/s, sampled "
              f"{row['sampled']:9.1f}" + (f", transformers {row['transformers']:9.1f}"
                                          if hf is not None else ""), flush=True)
    if device == "cuda":
        cfg = get_config("andrea-120m")
        model = models["andrea-120m"]
        prompt = [list(rng.integers(0, cfg.vocab_size, TTFT_PROMPT))]
        decoder = Decoder(model, 1)
        greedy = Sampling(temperature=0.0, top_k=0)
        row = dict(config="andrea-120m", prompt=TTFT_PROMPT, precision=precision,
                   ttft_ms=1e3 * _timed(lambda: generate(model, prompt, 1, greedy,
                                                         decoder=decoder), repeats=5))
        hf = _transformers_model(cfg, precision) if transformers else None
        if hf is not None:
            row["transformers_ttft_ms"] = 1e3 * _timed(
                lambda: _transformers_generate(hf, prompt, 1), repeats=5)
        rows.append(row)
        print(f"  time to the first token, {TTFT_PROMPT}-token prompt: {row['ttft_ms']:.2f} ms"
              + (f", transformers {row['transformers_ttft_ms']:.2f} ms" if hf else ""),
              flush=True)
    return rows


def generate_report(rows, device):
    rates = [r for r in rows if "greedy" in r]
    lines = [f"## Generation ({'H200' if device == 'cuda' else 'CPU, NumPy backend'})",
             "",
             f"Random weights in {rates[0]['precision']}, prompts of {rates[0]['prompt']} "
             f"random tokens, {rates[0]['tokens']} new tokens per sequence; tokens/s counts "
             "every sequence's new tokens over the whole call (the prefill included), the "
             "fastest of 3 after a warm-up. greedy: temperature 0; sampled: temperature 0.8, "
             "top-k 40 (microgpt.sample's defaults). transformers: GPT2LMHeadModel of the "
             "same geometry and precision, generate(do_sample=False, use_cache=True).",
             "",
             "| config | batch | greedy tok/s | sampled tok/s | transformers tok/s | ratio |",
             "|---|---:|---:|---:|---:|---:|"]
    for r in rates:
        theirs = r.get("transformers")
        lines.append(f"| {r['config']} | {r['batch']} | {r['greedy']:,.0f} | "
                     f"{r['sampled']:,.0f} | " + (f"{theirs:,.0f} | {r['greedy'] / theirs:.1f}x |"
                                                  if theirs else "- | - |"))
    for r in rows:
        if "ttft_ms" in r:
            theirs = r.get("transformers_ttft_ms")
            lines += ["", f"Time to the first token of a {r['prompt']}-token prompt at "
                      f"{r['config']} (the prefill and the first step, the fastest of 5): "
                      f"{r['ttft_ms']:.2f} ms" + (f"; transformers {theirs:.2f} ms."
                                                  if theirs else ".")]
    return lines + [""]
