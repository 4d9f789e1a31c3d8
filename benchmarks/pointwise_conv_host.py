"""Host and GPU cost of ResNet-50's 1x1 convolutions as cuDNN calls against matrix multiplies
(`lowering/pointwise_convolutions.py`), in one process, the two interleaved:

    python -m benchmarks.pointwise_conv_host [--json PATH]

For each of ResNet-50's stride-1 1x1 shapes (bf16, channels-last): the host time of one call
(batch 1, so the GPU keeps up; the median of interleaved rounds of 50 back-to-back calls, each
round pinned to the fastest vCPU as the default-mode suite does) and the GPU time at the
suite's batch 32 (CUDA events over 50 calls, median of rounds), forward (`convolution` against
`mm`) and backward (`convolution_backward` for the input and weight gradients against two
`mm`s)."""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch

# (in channels, out channels, map side, how many of ResNet-50's convolutions have the shape)
SHAPES = (
    (64, 64, 56, 1),
    (64, 256, 56, 4),
    (256, 64, 56, 2),
    (256, 128, 56, 1),
    (128, 512, 28, 4),
    (512, 128, 28, 3),
    (512, 256, 28, 1),
    (256, 1024, 14, 6),
    (1024, 256, 14, 5),
    (1024, 512, 14, 1),
    (512, 2048, 7, 3),
    (2048, 512, 7, 2),
)
ROUNDS, CALLS = 15, 50


def _variants(batch: int, cin: int, cout: int, side: int) -> dict[str, Callable[[], Any]]:
    device, dtype = "cuda", torch.bfloat16
    x = torch.randn(batch, cin, side, side, device=device, dtype=dtype)
    x = x.contiguous(memory_format=torch.channels_last)
    w = torch.randn(cout, cin, 1, 1, device=device, dtype=dtype)
    go = torch.randn(batch, cout, side, side, device=device, dtype=dtype)
    go = go.contiguous(memory_format=torch.channels_last)
    rows = batch * side * side
    x2, go2, w2 = (
        x.permute(0, 2, 3, 1).reshape(rows, cin),
        go.permute(0, 2, 3, 1).reshape(rows, cout),
        w.view(cout, cin),
    )
    convolution, backward, mm = (
        torch.convolution,
        torch.ops.aten.convolution_backward.default,
        torch.mm,
    )
    geometry = ([1, 1], [0, 0], [1, 1], False, [0, 0], 1)
    return {
        "forward cudnn": lambda: convolution(x, w, None, *geometry),
        "forward mm": lambda: mm(x2, w2.t()),
        "backward cudnn": lambda: backward(go, x, w, None, *geometry, [True, True, False]),
        "backward mm": lambda: (mm(go2, w2), mm(go2.t(), x2)),
    }


def _host_us(call: Callable[[], Any]) -> float:
    begin = time.perf_counter()
    for _ in range(CALLS):
        call()
    elapsed = time.perf_counter() - begin
    torch.cuda.synchronize()
    return elapsed / CALLS * 1e6


def _gpu_us(call: Callable[[], Any]) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(CALLS):
        call()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / CALLS * 1e3


def measure() -> dict[str, Any]:
    from benchmarks.cudagraph_suite import _pin_to_fastest_cpu

    rows = []
    totals: dict[str, dict[str, float]] = {"host_us": {}, "gpu_us": {}}
    for cin, cout, side, count in SHAPES:
        row: dict[str, Any] = {"shape": [cin, cout, side], "count": count}
        for what, batch, timer in (("host_us", 1, _host_us), ("gpu_us", 32, _gpu_us)):
            variants = _variants(batch, cin, cout, side)
            samples: dict[str, list[float]] = {name: [] for name in variants}
            for call in variants.values():  # warm-up: cuDNN plans, cuBLAS heuristics
                for _ in range(5):
                    call()
            torch.cuda.synchronize()
            for _ in range(ROUNDS):
                if what == "host_us":
                    _pin_to_fastest_cpu()
                for name, call in variants.items():
                    samples[name].append(timer(call))
            medians = {name: round(statistics.median(v), 2) for name, v in samples.items()}
            row[what] = medians
            for name, value in medians.items():
                totals[what][name] = round(totals[what].get(name, 0.0) + count * value, 1)
        rows.append(row)
        print(json.dumps(row), flush=True)
    return {"rows": rows, "resnet50_totals": totals, "torch": torch.__version__,
            "device": torch.cuda.get_device_name()}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json", help="write the result here")
    arguments = parser.parse_args()
    result = measure()
    print(json.dumps(result["resnet50_totals"], indent=1))
    if arguments.json:
        with open(arguments.json, "w") as handle:
            json.dump(result, handle, indent=1)


if __name__ == "__main__":
    main()
