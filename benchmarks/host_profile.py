"""Where a default-mode step's host time goes: one model, one mode, ember's default mode on
CUDA, a median wall step against the profiler's GPU time, and a cProfile of the steps.

    python -m benchmarks.host_profile --model hf_resnet --mode inference [--steps 50] [--top 30]

Issue 16's default-mode target is a wall step within 1.15x of the GPU time; a step above it
is host-bound, and the cProfile rows (own time per call, sorted) name what the host spends it
on: the guard check, the wrapper, extern calls through `torch.ops`, Triton launches. cProfile
slows Python down, so its totals are read as shares, not as times; the wall step is timed
without it. Needs CUDA (exits with a message without it); not part of CI.
"""

from __future__ import annotations

import argparse
import copy
import cProfile
import io
import pstats
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import torch

from benchmarks.case import autocast_for
from benchmarks.models import build_workload, spec


def _step(module: torch.nn.Module, run: Callable[..., Any], inputs: tuple[Any, ...], mode: str):
    """One step as the suite runs it (bf16 autocast; training: forward and backward)."""
    if mode == "training":
        with autocast_for(torch.device("cuda"), "bf16"):
            loss = run(*inputs)
        loss.backward()
        for parameter in module.parameters():
            parameter.grad = None
        return
    with torch.no_grad(), autocast_for(torch.device("cuda"), "bf16"):
        run(*inputs)


def _wall_ms(step: Callable[[], None], steps: int) -> float:
    times = []
    for _ in range(steps):
        torch.cuda.synchronize()
        started = time.perf_counter()
        step()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - started) * 1e3)
    return statistics.median(times)


def _gpu_ms(step: Callable[[], None], steps: int) -> float:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
    device_us = sum(
        event.self_device_time_total
        for event in prof.key_averages()
        if event.device_type == torch.autograd.DeviceType.CUDA
    )
    return device_us / 1e3 / steps


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="hf_resnet")
    parser.add_argument("--mode", default="inference", choices=("inference", "training"))
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--top", type=int, default=30)
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("host_profile: no CUDA device here; nothing measured")
        return 0
    import ember

    workload = build_workload(spec(args.model), "gpu", args.mode)
    module = copy.deepcopy(workload.module).to("cuda")
    inputs = tuple(t.to("cuda") for t in workload.inputs)
    run = ember.compile(module)

    def step() -> None:
        _step(module, run, inputs, args.mode)

    for _ in range(5):
        step()
    # the C tensor guards build in the background on a machine's first run (30-90 s): a
    # profile taken before they are in use shows the Python check (session 18's ResNet-50
    # profile did: `check_inputs` at line 2783, 0.37 ms a step)
    from ember.capture.guards.native import NATIVE

    guards_in_c = NATIVE.wait(300) is not None
    for _ in range(3):
        step()  # the checks switch to C on their next call
    wall = _wall_ms(step, args.steps)
    gpu = _gpu_ms(step, 5)
    print(
        f"{args.model} {args.mode}: wall {wall:.3f} ms, GPU {gpu:.3f} ms, wall/GPU {wall / gpu:.2f}"
        f", guards in C: {'yes' if guards_in_c else 'NO (' + str(NATIVE.reason) + ')'}"
    )
    profiler = cProfile.Profile()
    torch.cuda.synchronize()
    profiler.enable()
    for _ in range(args.steps):
        step()
    torch.cuda.synchronize()
    profiler.disable()
    text = io.StringIO()
    stats = pstats.Stats(profiler, stream=text)
    stats.sort_stats("tottime").print_stats(args.top)
    print(f"cProfile of {args.steps} steps (own time; divide by the steps for one):")
    print(text.getvalue())
    return 0


if __name__ == "__main__":
    sys.exit(main())
