"""Timers the sections share: CUDA events around eager launches, the replays of a
captured graph, and torch's events for the PyTorch side."""

def cuda_time(fn, reps, warmup=2):
    """Mean milliseconds of fn() over reps, by CUDA events on the default stream."""
    from numba import cuda

    for _ in range(warmup):
        fn()
    start, stop = cuda.event(timing=True), cuda.event(timing=True)
    start.record()
    for _ in range(reps):
        fn()
    stop.record()
    stop.synchronize()
    return cuda.event_elapsed_time(start, stop) / reps


CAPTURED_LAUNCHES = 20     # of one GEMM in a graph, for captured_time


def captured_time(fn, reps, ops, launches=CAPTURED_LAUNCHES):
    """Milliseconds a launch of fn(stream) takes inside a CUDA graph, as a captured step
    runs it: `launches` of them captured in one graph on the backend's stream, the fastest
    of reps replays. fn runs once eagerly first (it compiles there, and makes its tensor
    maps, which the captured launches then find)."""
    from numba import cuda

    fn(ops.stream)
    ops.synchronize()
    graph = ops.capture(lambda: [fn(ops.stream) for _ in range(launches)])
    best = float("inf")
    for _ in range(reps):
        start, stop = cuda.event(timing=True), cuda.event(timing=True)
        start.record(ops.stream)
        graph.replay()
        stop.record(ops.stream)
        stop.synchronize()
        best = min(best, cuda.event_elapsed_time(start, stop) / launches)
    return best


def torch_time(fn, reps, warmup=2):
    import torch

    for _ in range(warmup):
        fn()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        fn()
    stop.record()
    stop.synchronize()
    return start.elapsed_time(stop) / reps


def torch_captured_time(fn, reps, launches=CAPTURED_LAUNCHES):
    """captured_time's measure for PyTorch: `launches` of fn() captured in one torch CUDA
    graph, the fastest of reps replays; so that a microgpt figure from a graph is held to
    PyTorch's in a graph, neither paying for its host's launches."""
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):          # capture wants its warm-up on a side stream
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(launches):
            fn()
    best = float("inf")
    for _ in range(reps):
        start, stop = (torch.cuda.Event(enable_timing=True) for _ in range(2))
        start.record()
        graph.replay()
        stop.record()
        stop.synchronize()
        best = min(best, start.elapsed_time(stop) / launches)
    return best
