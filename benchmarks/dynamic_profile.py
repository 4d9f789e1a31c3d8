"""GPU kernels of ember's dynamic compile (automatic dynamic: one compiled function called over
the points) and of a static compile per point, on GPT-2 small's shape
(`ember.capture.testing.TinyDecoder`, bf16 autocast, inference): wall ms per call (median of
5 rounds of 10 calls) for eager, dynamic and static, then the profiler's top kernels by GPU
time for each compile. Issue 19 used it to find what the symbolic Graphs' kernels lost
(docs/perf/dynamic-shapes.md, session 9).

    python3 -m benchmarks.dynamic_profile [--points 16x256,4x256,4x16] [--top 12]
        [--warm-up 1x4,1x16,4x16]   (the dynamic function's first calls, in order)
"""

from __future__ import annotations

import argparse
import collections
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile

import ember
from ember.capture.testing import TinyDecoder

WARM_UP = "1x4,1x16,4x16"  # the first calls: static, then length, then batch symbolic


def _points(text: str) -> list[tuple[int, int]]:
    return [(int(b), int(n)) for b, n in (p.split("x") for p in text.split(","))]


def _autocast() -> Any:
    return torch.autocast("cuda", dtype=torch.bfloat16)


def wall_ms(fn: Callable[[torch.Tensor], Any], ids: torch.Tensor, calls: int = 10) -> float:
    with torch.no_grad(), _autocast():
        for _ in range(3):
            fn(ids)
        torch.cuda.synchronize()
        rounds = []
        for _ in range(5):
            started = time.perf_counter()
            for _ in range(calls):
                fn(ids)
            torch.cuda.synchronize()
            rounds.append((time.perf_counter() - started) / calls * 1e3)
    return statistics.median(rounds)


def top_kernels(name: str, fn: Callable[[torch.Tensor], Any], ids: torch.Tensor, top: int) -> None:
    calls = 3
    with torch.no_grad(), _autocast():
        for _ in range(3):
            fn(ids)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as profiler:
            for _ in range(calls):
                fn(ids)
            torch.cuda.synchronize()
    spent: collections.Counter[str] = collections.Counter()
    count: collections.Counter[str] = collections.Counter()
    for event in profiler.events():
        if event.device_type.name == "CUDA":
            spent[event.name] += event.device_time_total / calls / 1e3
            count[event.name] += 1
    print(f"--- {name}: GPU ms/call {sum(spent.values()):.3f}")
    for kernel, ms in spent.most_common(top):
        print(f"  {ms:8.3f} ms  x{count[kernel] // calls:<4} {kernel[:150]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--points", default="16x256,4x256,4x16", help="batch x length, ...")
    parser.add_argument("--top", type=int, default=12)
    parser.add_argument("--warm-up", default=WARM_UP, help="the dynamic function's first calls")
    options = parser.parse_args()
    points = _points(options.points)
    warm_up = _points(options.warm_up)
    torch.manual_seed(0)
    model = TinyDecoder(vocab=50257, width=768, heads=12, depth=12, context=256)
    model = model.eval().cuda()
    ids = {p: torch.randint(0, 50257, p, device="cuda") for p in (*warm_up, *points)}
    dynamic = ember.compile(model)
    with torch.no_grad(), _autocast():
        for point in (*warm_up, *points):
            dynamic(ids[point])
    for point in points:
        static = ember.compile(model, dynamic=False)
        with torch.no_grad(), _autocast():
            static(ids[point])
        times = {name: wall_ms(fn, ids[point]) for name, fn in
                 (("eager", model), ("dynamic", dynamic), ("static", static))}  # fmt: skip
        print(f"== point {point}: wall ms " + " ".join(f"{k} {v:.3f}" for k, v in times.items()))
        top_kernels(f"dynamic {point}", dynamic, ids[point], options.top)
        top_kernels(f"static {point}", static, ids[point], options.top)


if __name__ == "__main__":
    main()
