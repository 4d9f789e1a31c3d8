"""ember-inductor on CPU next to eager and torch.compile, measured round-robin.

`python -m benchmarks.inductor_cpu [--models a,b] [--modes inference,training]` builds each
model three times (same seed), compiles it with torch.compile (CPU inductor) and with
`ember.compile` (backend inductor), and then times the three **in turn, step by step**
(eager, torch.compile, ember, eager, ...), so that load from other processes on a shared
host hits all three alike; medians of the steps are reported. Also: cold compile (first
call minus a steady step, with empty caches), warm compile (after the backend's reset,
same process, on-disk caches kept), peak memory of one step (profiler allocations plus
parameters, gradients and inputs) and the output error vs eager. Writes a markdown table.
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

import torch

from benchmarks.memory import cpu_step_peak_bytes, resident_bytes
from benchmarks.models import build_workload, spec

MODELS = ("mlp", "small_cnn", "attention_block", "hf_resnet", "hf_gpt2")


def _step(module: Any, inputs: tuple[torch.Tensor, ...], mode: str) -> Callable[[], Any]:
    if mode == "inference":

        def infer() -> Any:
            with torch.no_grad():
                return module(*inputs)

        return infer

    def train() -> Any:
        loss = module(*inputs)
        loss.backward()
        return loss.detach()

    return train


def _timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    started = time.perf_counter()
    result = fn()
    return time.perf_counter() - started, result


def _error(result: Any, reference: Any) -> float:
    a, b = result.float(), reference.float()
    return float((a - b).norm() / b.norm().clamp_min(1e-12))


def run_case(name: str, mode: str, steps: int) -> dict[str, Any]:
    import torch._dynamo

    import ember.capture as capture

    workload = build_workload(spec(name), "small", mode)
    base, inputs = workload.module, workload.inputs
    modules = {"eager": base, "torch.compile": copy.deepcopy(base), "ember": copy.deepcopy(base)}
    compilers: dict[str, Callable[[Any], Any]] = {
        "eager": lambda m: m,
        "torch.compile": torch.compile,
        "ember": capture.compile,
    }
    resets = {"eager": lambda: None, "torch.compile": torch._dynamo.reset, "ember": capture.reset}
    row: dict[str, Any] = {"model": name, "mode": mode}
    compiled: dict[str, Callable[[], Any]] = {}
    first: dict[str, float] = {}
    outputs: dict[str, Any] = {}
    for backend, module in modules.items():
        step = _step(compilers[backend](module), inputs, mode)
        first[backend], outputs[backend] = _timed(step)
        compiled[backend] = step
    for step in compiled.values():  # warm-up
        step()
    samples: dict[str, list[float]] = {backend: [] for backend in compiled}
    for _ in range(steps):
        for backend, step in compiled.items():
            samples[backend].append(_timed(step)[0])
    median = {backend: statistics.median(times) for backend, times in samples.items()}
    for backend in ("torch.compile", "ember"):
        row[f"{backend} speedup"] = median["eager"] / median[backend]
        row[f"{backend} cold s"] = max(first[backend] - median[backend], 0.0)
        row[f"{backend} error"] = _error(outputs[backend], outputs["eager"])
        resets[backend]()
        again = _step(compilers[backend](modules[backend]), inputs, mode)
        row[f"{backend} warm s"] = max(_timed(again)[0] - median[backend], 0.0)
    for backend, step in compiled.items():
        module = modules[backend]
        state = [*module.parameters(), *module.buffers(), *inputs]
        grads = [p.grad for p in module.parameters() if p.grad is not None]
        row[f"{backend} peak MB"] = (
            cpu_step_peak_bytes(step) + resident_bytes([*state, *grads])
        ) / 1e6
        row[f"{backend} ms"] = median[backend] * 1e3
    return row


COLUMNS = (
    ("model", "{}"), ("mode", "{}"), ("eager ms", "{:.2f}"), ("torch.compile ms", "{:.2f}"),
    ("ember ms", "{:.2f}"), ("torch.compile speedup", "{:.2f}x"), ("ember speedup", "{:.2f}x"),
    ("torch.compile cold s", "{:.1f}"), ("ember cold s", "{:.1f}"),
    ("torch.compile warm s", "{:.1f}"), ("ember warm s", "{:.1f}"),
    ("eager peak MB", "{:.1f}"), ("torch.compile peak MB", "{:.1f}"), ("ember peak MB", "{:.1f}"),
    ("ember error", "{:.1e}"),
)  # fmt: skip


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| " + " | ".join(name for name, _ in COLUMNS) + " |",
        "|" + " --- |" * len(COLUMNS),
    ]
    for row in rows:
        cells = [fmt.format(row[name]) if name in row else "–" for name, fmt in COLUMNS]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--modes", default="inference,training")
    parser.add_argument("--steps", type=int, default=15)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    scratch = tempfile.mkdtemp(prefix="ember-bench-")
    os.environ.setdefault("EMBER_CACHE_DIR", os.path.join(scratch, "ember"))
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(scratch, "torchinductor"))
    rows = []
    for name in args.models.split(","):
        for mode in args.modes.split(","):
            try:
                rows.append(run_case(name, mode, args.steps))
            except Exception as error:  # report and go on
                rows.append({"model": name, "mode": mode, "ember error": float("nan")})
                print(f"{name}/{mode}: {type(error).__name__}: {error}")
            print(table(rows[-1:]).splitlines()[-1], flush=True)
    text = table(rows)
    print(text)
    if args.out:
        with open(args.out, "w") as file:
            file.write(text + "\n")


if __name__ == "__main__":
    main()
