"""The timers (CUDA events around back-to-back calls, CUDA graph replay, host time per call)
and the ceiling they are compared with: a device-to-device copy of ELEMENTS bf16 elements.
torch is imported when a timer runs, not with the module."""
from __future__ import annotations

import statistics
import time

ELEMENTS = 1 << 27


def _torch():
    import torch

    return torch


def time_events(fn, calls: int = 20, reps: int = 15, warmup: int = 3) -> float:
    """Median milliseconds of one call: CUDA events around `calls` back-to-back calls (so
    the host's per-call work overlaps the previous kernel, as in real use), `reps` times."""
    torch = _torch()
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(calls):
            fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) / calls)
    return statistics.median(times)


def time_graph(fn, calls: int = 100, reps: int = 20) -> float:
    """Median milliseconds of one call, from replays of a CUDA graph of `calls` calls."""
    torch = _torch()
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        with torch.cuda.graph(graph, stream=stream):
            for _ in range(calls):
                fn()
    return time_events(graph.replay, calls=1, reps=reps, warmup=2) / calls


def host_cost_us(fn, calls: int = 2000, rounds: int = 5) -> float:
    """Median microseconds of host time per call (dispatch + launch, no sync)."""
    torch = _torch()
    fn()
    torch.cuda.synchronize()
    per = []
    for _ in range(rounds):
        t = time.perf_counter()
        for _ in range(calls):
            fn()
        per.append((time.perf_counter() - t) / calls * 1e6)
        torch.cuda.synchronize()
    return statistics.median(per)


def copy_gbps() -> float:
    torch = _torch()
    src = torch.randn(ELEMENTS, device="cuda", dtype=torch.bfloat16)
    dst = torch.empty_like(src)
    ms = time_events(lambda: dst.copy_(src))
    return 2 * src.numel() * src.element_size() / ms / 1e6
