"""The memory check: a run that cannot fit is refused, in one line, before the slow part."""
import math

from microgpt.errors import UserError
from microgpt.params import ParamLayout
from microgpt.step import step_specs


def check_memory(config, args, world, backend, precision):
    """Refuse, in one line, a run that cannot fit: what it needs at least (parameters,
    gradients and AdamW moments, in bf16 the copy of the matrices, the activations of one
    batch, the validation batches) against the memory available to this rank."""
    rows = args.batch_size // world.world_size
    T = config.context
    step_bytes = sum(math.prod(b.shape) * (b.per_layer or 1) * (2 if b.dtype == "uint16" else 4)
                     for b in step_specs(config, rows, T, precision) if b.same_as is None)
    layout = ParamLayout(config)
    need = (4 * 4 * layout.size + (2 * layout.n_decay if precision == "bf16" else 0)
            + step_bytes + 8 * args.eval_batches * rows * T)
    n_params = layout.size
    where, available = available_memory(backend)
    if available is not None and need > available:
        gib = 2 ** 30
        raise UserError(f"the run needs at least {need / gib:,.1f} GiB ({n_params:,} parameters, "
                        f"batches of {rows:,} x {T} tokens) but {where} has "
                        f"{available / gib:,.1f} GiB available; pass a smaller --batch-size, "
                        "--eval-batches, --context or model")


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
