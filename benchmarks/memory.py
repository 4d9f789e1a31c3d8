"""Peak memory of a training or inference step, per backend, so ratios can be compared.

GPU: `torch.cuda.max_memory_allocated` over the timed steps (weights, optimizer state and
activations; allocator caching excluded). CPU has no allocator statistics, so the proxy is
the bytes of live parameters, buffers, optimizer state and inputs plus the peak of the
running sum of tensor allocations and frees the torch profiler records during one step.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterable

import torch


def release(device: torch.device) -> None:
    """Frees what Python and the CUDA caching allocator hold, before a new case."""
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def start_peak(device: torch.device) -> None:
    """Starts a new peak window (GPU only; the CPU proxy measures its own step)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)


def cuda_peak_bytes(device: torch.device) -> int:
    """The CUDA allocator's peak since `start_peak`."""
    torch.cuda.synchronize(device)
    return int(torch.cuda.max_memory_allocated(device))


def resident_bytes(tensors: Iterable[torch.Tensor]) -> int:
    """Bytes of the distinct storages behind `tensors`."""
    seen: dict[int, int] = {}
    for tensor in tensors:
        storage = tensor.untyped_storage()
        seen[storage.data_ptr()] = storage.nbytes()
    return sum(seen.values())


def cpu_step_peak_bytes(step: Callable[[], object]) -> int:
    """Peak of the running sum of CPU tensor allocations during one `step` (profiler-based)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as profiler:
        step()
    events = [e for e in profiler.profiler.kineto_results.events() if e.name() == "[memory]"]
    events.sort(key=lambda e: e.start_ns())
    current = peak = 0
    for event in events:
        current += event.nbytes()
        peak = max(peak, current)
    return peak
