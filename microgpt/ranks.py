"""Rank agreement under mpirun: the data-parallel ranks fail together and train the same
run."""
from microgpt import distributed
from microgpt.config import ConfigError
from microgpt.errors import BackendError, UserError


def on_every_rank(world, work):
    """work() -> its result. Under mpirun a user error on any rank is raised on every rank
    here, at the same point (and reported by rank 0): a rank that failed alone would leave
    the others waiting for it in their next collective. work must not communicate, but
    for the barrier of rank 0."""
    try:
        result, failure = work(), None
    except (UserError, ConfigError, BackendError) as err:
        if world.world_size == 1:
            raise
        result, failure = None, str(err)
    failed = [(rank, f) for rank, f in enumerate(world.allgather(failure)) if f is not None]
    if failed:
        rank, message = failed[0]
        raise distributed.CollectiveError(message if rank == 0 else f"rank {rank}: {message}")
    return result


def check_ranks_agree(world, what, value):
    """Every data-parallel rank must train the same run: different arguments or data would
    average gradients of different batches. All ranks take part and fail together; rank 0
    alone says why."""
    values = world.allgather(value)
    for rank, theirs in enumerate(values):
        if theirs != values[0]:
            if isinstance(value, dict):
                key = next(k for k in value if theirs.get(k) != values[0].get(k))
                detail = f"--{key.replace('_', '-')} {theirs.get(key)} against {values[0][key]}"
            else:
                detail = f"{theirs} against {values[0]}"
            raise distributed.CollectiveError(
                f"rank {rank} has other {what} than rank 0 ({detail}); start every rank with "
                "the same arguments and data")
