"""Step timers: wall clock on CPU, CUDA events on GPU; the median of the timed steps is reported.

A step is timed in full (forward, and in training backward and the optimizer step). Timing
stops early once a case's time allowance is spent, keeping at least `min_steps` samples.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch


def synchronize(device: torch.device) -> None:
    """Waits for queued device work, so that wall-clock readings include it."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed_call(step: Callable[[], object], device: torch.device) -> float:
    """Wall-clock seconds of one call, device work included (used for first calls)."""
    synchronize(device)
    start = time.perf_counter()
    step()
    synchronize(device)
    return time.perf_counter() - start


def median_step_seconds(
    step: Callable[[], object],
    device: torch.device,
    steps: int,
    allowance_s: float,
    min_steps: int = 3,
) -> tuple[float, int]:
    """Median seconds per step over up to `steps` steps (CUDA events on GPU), and the count."""
    samples: list[float] = []
    deadline = time.perf_counter() + allowance_s
    if device.type == "cuda":
        pairs = []
        for i in range(steps):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            step()
            end.record()
            pairs.append((start, end))
            if i + 1 >= min_steps and time.perf_counter() > deadline:
                break
        torch.cuda.synchronize(device)
        samples = [start.elapsed_time(end) / 1000.0 for start, end in pairs]
    else:
        for i in range(steps):
            start_s = time.perf_counter()
            step()
            samples.append(time.perf_counter() - start_s)
            if i + 1 >= min_steps and time.perf_counter() > deadline:
                break
    return statistics.median(samples), len(samples)


def interleaved_medians(
    steps_by_name: dict[str, Callable[[], object]],
    device: torch.device,
    steps: int,
    allowance_s: float,
    min_steps: int = 3,
) -> tuple[dict[str, float], int]:
    """Median seconds per step of each of several steps timed in turn, round by round (a
    step of each, then again), so that load from other processes hits them alike; and the
    number of rounds. Wall clock around each step, the device synchronized before and after."""
    samples: dict[str, list[float]] = {name: [] for name in steps_by_name}
    deadline = time.perf_counter() + allowance_s
    for i in range(steps):
        for name, step in steps_by_name.items():
            samples[name].append(timed_call(step, device))
        if i + 1 >= min_steps and time.perf_counter() > deadline:
            break
    rounds = len(next(iter(samples.values()), []))
    return {name: statistics.median(times) for name, times in samples.items()}, rounds
