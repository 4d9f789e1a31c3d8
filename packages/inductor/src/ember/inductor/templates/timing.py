"""How GEMM choices are timed: CUDA-graph replay, each call after an L2 flush.

`replay_time_ms(launch)` captures `calls` launches in a CUDA graph, each after a write of
twice the L2 cache (so every call reads its operands from memory, as a product in a model
does after other work), and a second graph of the flushes alone; it replays them in turn and
returns the median difference per call. Graph replay counts GPU time only (no Python launch
cost: the vendor path's views and out= call would otherwise make small products CPU-bound),
and `calls` grows for short kernels so that a replay lasts about a millisecond. The template
configurations, the template-or-vendor choice (`gemm_choice.py`) and
`benchmarks/gemm_templates.py` all time this way. Falls back to CUDA events around the
launches where a launch cannot be captured.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable

import torch

from ember.runtime.triton import cuda_bench

TARGET_MS = 1.0  # GPU time of one replay of the launches alone
MAX_CALLS = 64


def replay_time_ms(
    launch: Callable[[], None], *, replays: int = 7, flush: bool = True, calls: int | None = None
) -> float:
    """Median milliseconds of one `launch()` by CUDA-graph replay (see the module)."""
    if torch.cuda.is_current_stream_capturing():
        return cuda_bench(launch)
    try:
        estimate = _first_ms(launch)
        if calls is None:
            calls = max(2, min(MAX_CALLS, int(TARGET_MS / max(estimate, 1e-3))))
        buffer = _flush_buffer() if flush else None
        timed = _capture(launch, calls, buffer)
        alone = _capture(None, calls, buffer) if buffer is not None else None
    except Exception:  # e.g. an operation capture refuses
        torch.cuda.synchronize()
        return cuda_bench(launch)
    with_launch: list[float] = []
    flushes: list[float] = []
    for _ in range(replays):
        with_launch.append(_replay_ms(timed))
        if alone is not None:
            flushes.append(_replay_ms(alone))
    base = statistics.median(flushes) if flushes else 0.0
    return max(statistics.median(with_launch) - base, 0.0) / calls


def _first_ms(launch: Callable[[], None]) -> float:
    """One launch on a side stream (warm-up, as capture needs), timed by events."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        launch()
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        launch()
        end.record()
    torch.cuda.current_stream().wait_stream(stream)
    end.synchronize()
    return float(start.elapsed_time(end))


def _flush_buffer() -> torch.Tensor:
    size = torch.cuda.get_device_properties(torch.cuda.current_device()).L2_cache_size
    return torch.empty(max(2 * int(size), 1 << 20), dtype=torch.int8, device="cuda")


def _capture(
    launch: Callable[[], None] | None, calls: int, buffer: torch.Tensor | None
) -> torch.cuda.CUDAGraph:
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            if buffer is not None:
                buffer.zero_()
            if launch is not None:
                launch()
    graph.replay()
    torch.cuda.synchronize()
    return graph


def _replay_ms(graph: torch.cuda.CUDAGraph) -> float:
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record()
    graph.replay()
    end.record()
    end.synchronize()
    return float(start.elapsed_time(end))


__all__ = ["replay_time_ms"]
