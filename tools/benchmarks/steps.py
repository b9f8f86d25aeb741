"""Whole training steps (forward, backward, AdamW): microgpt against the PyTorch GPT of
the same architecture."""

import gc
import time

import numpy as np
from torch_gpt import torch_gpt, training_step


# (label, config, overrides, B, T): andrea's two, then the sizes users train: andrea-120m at
# a long context and GPT-2 medium's and XL's geometries at the default vocabulary
GEOMETRIES = (
    ("andrea-12m", "andrea-12m", {}, 64, 256),
    ("andrea-120m", "andrea-120m", {}, 16, 1024),
    ("andrea-120m-t4096", "andrea-120m", dict(context=4096), 4, 4096),
    ("gpt2-medium", "andrea-120m", dict(n_layer=24, d_model=1024, n_head=16), 16, 1024),
    ("gpt2-xl", "andrea-120m", dict(n_layer=48, d_model=1600, n_head=25), 8, 1024),
)
# float32 and the deterministic step only where they take seconds, not minutes
SMALL = ("andrea-12m", "andrea-120m")
# MFU's peak: the H200's dense bf16 rate as its matmuls reach it (about 790 TFLOP/s), not
# the datasheet's 989 that the trainer's metrics divide by; issue 28's target (60% at
# andrea-120m) is of this one
MFU_PEAK_FLOPS = 790e12


# a recompute mode's part of its run's and figures' names (microgpt.activations'
# RECOMPUTE_MODES; "all" as the recomputed run was named before "gelu" was a mode)
RECOMPUTED_NAMES = {"off": "", "gelu": "_recomputed_gelu", "all": "_recomputed"}


def step_runs(small, fp32=True, only_runs=None, recompute=()):
    """-> [(name, precision, graph, deterministic, recompute mode)]: the runs of microgpt's
    step a geometry times (small: one of SMALL, where float32 and the deterministic step
    take seconds). only_runs: the names of those to time (None: all that apply but the
    recomputed ones); recompute: the modes ("gelu", "all") whose bf16 graph is timed
    whatever only_runs names. A recomputed run not in recompute is timed only where
    only_runs names it."""
    runs = ([("fp32", True, False, "off")] if fp32 and small else []) + [
        ("bf16", False, False, "off"), ("bf16", True, False, "off")] + [
        ("bf16", True, False, mode) for mode in ("gelu", "all")
        if mode in recompute or only_runs] + (
        [("bf16", True, True, "off")] if small else [])
    named = []
    for precision, graph, deterministic, mode in runs:
        name = (f"ours_{precision}_{'graph' if graph else 'eager'}"
                + ("_deterministic" if deterministic else "") + RECOMPUTED_NAMES[mode])
        if not only_runs or name in only_runs or mode in recompute:
            named.append((name, precision, graph, deterministic, mode))
    return named


def mfu(tok_s, flops_per_token):
    """The share of MFU_PEAK_FLOPS that tok_s tokens a second of flops_per_token make."""
    return tok_s * flops_per_token / MFU_PEAK_FLOPS


def bench_steps(reps, compile_torch=True, fp32=True, geometries=None, only_runs=None,
                recompute=()):
    """-> a row of figures a geometry (geometries: those labels only). only_runs: the
    runs to time, by the names of their figures (ours_bf16_graph,
    ours_bf16_graph_recomputed_gelu, ours_bf16_graph_recomputed, torch_compile, ...; None:
    all that apply but the recomputed ones, which only a call that names them pays for):
    a call with a few minutes to spare measures what it asks about (torch.compile's peak
    memory alone, say). recompute: the modes ("gelu", "all") of microgpt's bf16 graph
    timed beside the kept one, whatever only_runs names (step_runs)."""
    import torch
    from numba import cuda
    from microgpt import GPT, get_config
    from microgpt.cuda_backend import CudaBackend
    from microgpt.metrics import flops_per_token
    from microgpt.optim import AdamW, AdamWConfig
    from microgpt.step import Step

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    out = []
    for label, name, overrides, B, T in GEOMETRIES:
        if geometries and label not in geometries:
            continue
        cfg = get_config(name, **overrides)
        small = label in SMALL
        rng = np.random.default_rng(0)
        idx = rng.integers(0, cfg.vocab_size, (B, T)).astype(np.int32)
        targets = rng.integers(0, cfg.vocab_size, (B, T)).astype(np.int32)

        row = {}
        # deterministic: the same bits every run (split-K in order), as --deterministic
        # trains; a recompute mode: GELU's output (and the LayerNorms') recomputed, as
        # --recompute gelu (all) trains: the memory it saves, the time it costs
        for run, precision, graph, deterministic, mode in step_runs(small, fp32, only_runs,
                                                                    recompute):
            # the runs before freed now, not while this one is measured (numba defers the
            # frees of the arrays let go; gc takes any cycle that still holds some)
            gc.collect()
            cuda.current_context().deallocations.clear()
            free_before, total = cuda.current_context().get_memory_info()
            model = GPT(cfg, backend=CudaBackend(deterministic=deterministic),
                        precision=precision, recompute=mode)
            step = Step(model, AdamW(model, AdamWConfig(total_steps=10**6)), B, T, graph=graph)
            for _ in range(2):          # compile; then capture
                step.run(idx, targets)
            step.metrics()
            # the host's cost of a step, the device idle: what a graph saves
            host = []
            for _ in range(min(reps, 5)):
                model.backend.synchronize()
                t0 = time.perf_counter()
                step.run(idx, targets)
                host.append(time.perf_counter() - t0)
            step.metrics()
            t0 = time.perf_counter()
            for _ in range(reps):
                step.run(idx, targets)
            step.metrics()              # the one read back, which waits for the device
            ours_s = (time.perf_counter() - t0) / reps
            free_after, _ = cuda.current_context().get_memory_info()
            row[run + "_tok_s"] = B * T / ours_s
            row[run + "_host_ms"] = 1e3 * float(np.median(host))
            gib = (free_before - free_after) / 2**30
            if not deterministic:
                row[f"ours_{precision}{RECOMPUTED_NAMES[mode]}_gib"] = gib
            # as it is measured: a run cut short by a time limit keeps what came before
            print(f"   {label} {run}: {B * T / ours_s:,.0f} tok/s, {gib:.2f} GiB", flush=True)
            model = step = None         # free the device memory before the next runs
        # (each geometry's T is its context, over which flops_per_token counts attention)
        row.update(config=label, B=B, T=T, flops_per_token=flops_per_token(cfg))
        t_idx, t_targets = (
            torch.from_numpy(idx).long().cuda(),
            torch.from_numpy(targets).long().cuda(),
        )
        torch_runs = ([("torch_fp32", False, False)] if fp32 and small else []) + [
            ("torch_bf16", True, False)]
        if compile_torch:
            torch_runs.append(("torch_compile", True, True))
        for run, autocast, compiled in torch_runs:
            if only_runs and run not in only_runs:
                continue
            torch_step = training_step(torch_gpt(cfg), t_idx, t_targets, compiled=compiled,
                                       autocast=autocast)
            torch.cuda.reset_peak_memory_stats()
            try:
                for _ in range(3 if compiled else 1):     # compiled: its warm-up recompiles
                    torch_step()
            except Exception as e:      # torch.compile needs a toolchain the machine may lack
                print(f"   {run} did not run: {type(e).__name__}: {e}"[:300], flush=True)
                row[run + "_tok_s"] = row[run + "_gib"] = None
                continue
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(reps):
                torch_step()
            torch.cuda.synchronize()
            row[run + "_tok_s"] = B * T * reps / (time.perf_counter() - t0)
            row[run + "_gib"] = torch.cuda.max_memory_allocated() / 2**30
            torch_step = None
            torch.cuda.empty_cache()
        out.append(row)
        print("  ", row, flush=True)
    return out


def steps_report(rows):
    def cell(value, fmt):
        return "n/a" if value is None else format(value, fmt)
    lines = [
        "## Whole training step (forward + backward + AdamW)",
        "",
        "tokens/s (peak device memory, GiB). microgpt's step is microgpt.step.Step replayed "
        "as one CUDA graph; PyTorch's is the same architecture in float32 (TF32 off), "
        "bf16 autocast (eager), and bf16 autocast under torch.compile, each with fused "
        "AdamW and gradient clipping. gpt2-medium: 24 layers of 1024, 16 heads; gpt2-xl: 48 "
        "of 1600, 25 heads; both at andrea-120m's vocabulary of 50,304. MFU: training FLOPs "
        "a token (microgpt.metrics.flops_per_token, attention over the full T x T square) "
        f"times tokens/s, over {MFU_PEAK_FLOPS / 1e12:.0f} TFLOP/s (the H200's dense bf16 "
        "rate as matmuls reach it, not the datasheet's 989).",
        "",
        "| config | B x T | microgpt fp32 | microgpt bf16 | PyTorch fp32 | PyTorch bf16 | "
        "torch.compile bf16 | bf16 / PyTorch bf16 | bf16 / torch.compile | microgpt bf16 MFU "
        "| torch.compile MFU |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        cells = [r["config"], f"{r['B']} x {r['T']}"]
        for tok_s, gib in (("ours_fp32_graph_tok_s", "ours_fp32_gib"),
                           ("ours_bf16_graph_tok_s", "ours_bf16_gib"),
                           ("torch_fp32_tok_s", "torch_fp32_gib"),
                           ("torch_bf16_tok_s", "torch_bf16_gib"),
                           ("torch_compile_tok_s", "torch_compile_gib")):
            cells.append(f"{cell(r.get(tok_s), ',.0f')} ({cell(r.get(gib), '.1f')})")
        ours = r.get("ours_bf16_graph_tok_s")
        for ref in ("torch_bf16_tok_s", "torch_compile_tok_s"):
            cells.append(cell(ours and r.get(ref) and ours / r[ref], ".2f"))
        for tok_s in (ours, r.get("torch_compile_tok_s")):
            cells.append(cell(tok_s and mfu(tok_s, r["flops_per_token"]), ".1%"))
        lines.append("| " + " | ".join(cells) + " |")
    lines += [
        "",
        "microgpt's bf16 step launched op by op (eager) and replayed as one CUDA graph; "
        "host ms: the Python side of one step with the device idle. Deterministic: the "
        "graph of the step that gives the same bits every run (--deterministic: split-K "
        "added in order, the embedding's backward sorted), and its time against the "
        "default graph's.",
        "",
        "| config | eager tok/s | eager host ms | graph tok/s | graph host ms | "
        "deterministic tok/s | deterministic step time / graph's |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        same_bits = r.get("ours_bf16_graph_deterministic_tok_s")
        if same_bits is None or None in (r.get("ours_bf16_eager_tok_s"),
                                         r.get("ours_bf16_graph_tok_s")):
            continue
        lines.append(f"| {r['config']} | {r['ours_bf16_eager_tok_s']:,.0f} | "
                     f"{r['ours_bf16_eager_host_ms']:.2f} | "
                     f"{r['ours_bf16_graph_tok_s']:,.0f} | "
                     f"{r['ours_bf16_graph_host_ms']:.2f} | {same_bits:,.0f} | "
                     f"{r['ours_bf16_graph_tok_s'] / same_bits:.3f} |")
    lines += [
        "",
        "microgpt's bf16 graph with GELU's output recomputed in the backward (--recompute "
        "gelu) and with the LayerNorms' outputs too (--recompute all), beside the one that "
        "keeps them (the default where the run fits), and torch.compile's peak: GiB (the "
        "device's free memory before and after building and capturing the step; "
        "torch.compile's max_memory_allocated) and tokens/s (tools/bench.py "
        "--steps-recompute gelu all).",
        "",
        "| config | kept GiB | gelu GiB | all GiB | torch.compile GiB | kept tok/s | gelu "
        "tok/s | all tok/s | gelu step time / kept | all step time / kept |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    modes = [RECOMPUTED_NAMES[mode] for mode in ("gelu", "all")]
    for r in rows:
        kept = r.get("ours_bf16_graph_tok_s")
        again = [r.get(f"ours_bf16_graph{m}_tok_s") for m in modes]
        if again == [None, None] and r.get("torch_compile_gib") is None:
            continue
        gib = [r.get(f"ours_bf16{m}_gib") for m in [""] + modes] + [r.get("torch_compile_gib")]
        cells = ([r["config"]] + [cell(g, ".2f") for g in gib]
                 + [cell(t, ",.0f") for t in [kept] + again]
                 + [cell(kept and t and kept / t, ".3f") for t in again])
        lines.append("| " + " | ".join(cells) + " |")
    return lines + [""]
