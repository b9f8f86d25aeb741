"""The memory check: a run that cannot fit is refused, in one line, before the slow part."""
import math

from microgpt.errors import UserError
from microgpt.params import ParamLayout
from microgpt.step import step_specs

# --recompute: GPT's recompute on, off, or on only where the run would not fit otherwise
RECOMPUTE_CHOICES = ("auto", "on", "off")


def required_bytes(config, rows, precision, eval_batches, moment_shards=1, accum=1,
                   recompute=False, deterministic=False):
    """What a rank's run of `rows` sequences a micro-batch (accum of them a step) needs at
    least: the parameters, their gradients and AdamW moments (float32; under ZeRO-1 the
    moments of one of moment_shards shards), in bf16 the matrices' copy, the buffers of a
    step as allocated (views and shared scratch once; recompute: the model's;
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
    the moments sharded over the ranks) -> whether its step recomputes the LayerNorms' and
    GELU's outputs (GPT's recompute): "on" and "off" as they say, "auto" only where the
    run would not fit otherwise (it costs ~1.5% of the step's time)."""
    rows = args.batch_size // world.world_size

    def need(again):
        return required_bytes(config, rows, precision, args.eval_batches,
                              world.world_size if zero else 1, args.grad_accum, again,
                              getattr(backend, "deterministic", False))
    where, available = available_memory(backend)
    if available is None:
        return recompute == "on"
    chosen = recompute == "on" or recompute == "auto" and need(False) > available
    if need(chosen) > available:
        gib = 2 ** 30
        fix = "a smaller --batch-size, --eval-batches, --context or model"
        if not chosen and need(True) <= available:      # --recompute off
            fix = f"--recompute auto (it needs {need(True) / gib:,.1f} GiB), or {fix}"
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
