"""The memory check: a run that cannot fit is refused, in one line, before the slow part."""
import math

from microgpt.activations import RECOMPUTE_MODES, recompute_mode
from microgpt.errors import UserError
from microgpt.params import ParamLayout
from microgpt.step import step_specs

# --recompute: a mode of activations.RECOMPUTE_MODES ("off", "gelu", "all"), "on" the same
# as "all" (its name before "gelu"), or "auto": the least of them the run fits with
RECOMPUTE_CHOICES = ("auto",) + RECOMPUTE_MODES + ("on",)


def required_bytes(config, rows, precision, eval_batches, moment_shards=1, accum=1,
                   recompute="off", deterministic=False):
    """What a rank's run of `rows` sequences a micro-batch (accum of them a step) needs at
    least: the parameters, their gradients and AdamW moments (float32; under ZeRO-1 the
    moments of one of moment_shards shards), in bf16 the matrices' copy, the buffers of a
    step as allocated (views and shared scratch once; recompute: the model's mode;
    deterministic: a deterministic backend's, whose batch carries the ids' token_runs
    too), and the validation batches."""
    layout = ParamLayout(config)
    T = config.context
    moments = 2 * 4 * -(-layout.size // moment_shards)
    return (2 * 4 * layout.size + moments + (2 * layout.n_decay if precision == "bf16" else 0)
            + sum(spec.nbytes for spec in step_specs(config, rows, T, precision, accum,
                                                     recompute=recompute,
                                                     token_runs=deterministic))
            + 8 * eval_batches * rows * T)


def check_memory(config, args, world, backend, precision, zero=False, recompute="auto"):
    """Refuse a run whose required_bytes exceed the memory available to this rank (zero:
    the moments sharded over the ranks) -> the recompute mode of its step (which of the
    LayerNorms' and GELU's outputs the backward writes again: GPT's recompute): a mode of
    RECOMPUTE_MODES as it says ("on": "all"), "auto" the first of them, the fastest, that
    the run fits with ("off", then "gelu" at ~0.8% of the step's time, then "all" at
    ~1.5%). A run refused names the mode it would fit with, where there is one."""
    rows = args.batch_size // world.world_size

    def need(mode):
        return required_bytes(config, rows, precision, args.eval_batches,
                              world.world_size if zero else 1, args.grad_accum, mode,
                              getattr(backend, "deterministic", False))
    where, available = available_memory(backend)
    if recompute != "auto":
        chosen = recompute_mode("all" if recompute == "on" else recompute)
    elif available is None:
        chosen = "off"
    else:
        chosen = next((m for m in RECOMPUTE_MODES if need(m) <= available),
                      RECOMPUTE_MODES[-1])
    if available is not None and need(chosen) > available:
        gib = 2 ** 30
        fix = "a smaller --batch-size, --eval-batches, --context or model"
        # the least mode that saves more than this one and fits (none after auto's,
        # which tried them all)
        fits = [m for m in RECOMPUTE_MODES[RECOMPUTE_MODES.index(chosen) + 1:]
                if need(m) <= available]
        if fits:
            fix = f"--recompute {fits[0]} (it needs {need(fits[0]) / gib:,.1f} GiB), or {fix}"
        raise UserError(f"the run needs at least {need(chosen) / gib:,.1f} GiB "
                        f"({ParamLayout(config).size:,} parameters, batches of {rows:,} x "
                        f"{config.context} tokens) but {where} has {available / gib:,.1f} GiB "
                        f"available; pass {fix}")
    return chosen


def available_memory(backend):
    """-> (where, bytes available): the GPU's free memory on the cuda backend, else Linux's
    MemAvailable; bytes is None where it cannot be told."""
    if backend.name == "cuda":
        from numba import cuda
        free = cuda.current_context().get_memory_info().free
        return "the GPU", free if math.isfinite(free) else None     # the simulator says inf
    try:
        with open("/proc/meminfo") as f:
            fields = dict(line.split(":", 1) for line in f)
        return "this machine", int(fields["MemAvailable"].split()[0]) * 1024
    except (OSError, KeyError, ValueError):
        return "this machine", None
