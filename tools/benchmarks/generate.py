"""tokens/s of microgpt.generate (a KV cache) beside the full-window generation it replaced."""

import time

import numpy as np


def full_window_generate(model, prompt_ids, n_tokens, rng):
    """The generation microgpt.generate replaced, for the "before" column: every token runs
    the model over one (1, context) window, zero-padded, and copies all its logits back."""
    from microgpt.generate import pick_token

    context = model.config.context
    ids, window = list(prompt_ids), np.zeros((1, context), np.int32)
    for _ in range(n_tokens):
        recent = ids[-context:]
        window[0, :len(recent)] = recent
        logits = model.forward(window)[0, len(recent) - 1]
        ids.append(pick_token(logits, temperature=0.8, top_k=40, rng=rng))
    return ids[len(prompt_ids):]


def bench_generate(device, tokens, before_tokens, prompt=16):
    """tokens/s of generate() (the prefill of a prompt included) and of the full-window
    loop, after a warm-up that compiles every kernel both launch; sample's defaults
    (temperature 0.8, top-k 40), random parameters (the speed does not depend on them)."""
    from microgpt import GPT, get_config
    from microgpt.generate import generate

    rows = []
    for name in ("andrea-12m", "andrea-120m"):
        cfg = get_config(name)
        model = GPT(cfg, backend="cuda" if device == "cuda" else "numpy")
        rng = np.random.default_rng(0)
        prompt_ids = list(rng.integers(0, cfg.vocab_size, prompt))

        def after(n):
            generate(model, prompt_ids, n, temperature=0.8, top_k=40, rng=rng,
                     vocab_limit=cfg.vocab_size)

        def before(n):
            full_window_generate(model, prompt_ids, n, rng)

        row = dict(config=name, prompt=prompt, tokens=tokens, before_tokens=before_tokens)
        for label, run, n in (("after", after, tokens), ("before", before, before_tokens)):
            run(2)
            t0 = time.perf_counter()
            run(n)
            row[label] = n / (time.perf_counter() - t0)
        rows.append(row)
        print(f"  {name:12s} KV cache {row['after']:9.1f} tok/s   full window "
              f"{row['before']:9.2f} tok/s   x{row['after'] / row['before']:.1f}", flush=True)
    return rows


def generate_report(rows, device):
    lines = [f"## Generation tokens/s ({'H200' if device == 'cuda' else 'CPU, NumPy backend'})",
             "",
             f"A prompt of {rows[0]['prompt']} random tokens, temperature 0.8, top-k 40, batch 1; "
             "the time of the whole call, prefill included, after a warm-up.",
             "",
             "| config | KV cache tok/s (tokens) | full window tok/s (tokens) | speed-up |",
             "|---|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['config']} | {r['after']:,.1f} ({r['tokens']}) | "
                     f"{r['before']:,.2f} ({r['before_tokens']}) | "
                     f"{r['after'] / r['before']:,.1f} |")
    return lines + [""]
