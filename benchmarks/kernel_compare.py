"""Kernel by kernel: the GPU time each backend's kernels take per step, side by side.

For each model and mode, eager, torch.compile and ember run the same seeded workload in one
process (bf16 autocast by default). Per backend it records:

- **GPU ms per step**: the sum of the durations of every kernel, memcpy and memset the
  profiler (CUPTI) records over `--profile-steps` steps, divided by the steps. It leaves out
  the CPU side (launch overhead, Python), which `wall ms` (median step, CUDA events, no
  profiler) includes.
- **peak MiB**: `torch.cuda.max_memory_allocated` over the timed steps, minus what was
  allocated before the module was built (weights, optimizer state and activations).
- **kernels**: each kernel's name, calls and time per step, with the op that launched it:
  the innermost ATen op around its launch for library kernels (cuBLAS, cuDNN, flash
  attention, ATen's own elementwise kernels), else the generated kernel's name (Triton
  kernels of ember and torch.compile name the ops they fuse). Every kernel also gets a
  class (matmul, convolution, attention, layout conversion, copy, generated pointwise,
  generated reduction, other ATen) so that the backends compare row by row.

Models run in separate processes (`--jobs` at once; a crash cannot poison another's CUDA
context); measurement windows are exclusive (benchmarks' `MeasurementLock`, which pauses the
other workers), compiles overlap.

    python -m benchmarks.kernel_compare --models hf_gpt2,hf_resnet --out OUT
    python -m benchmarks.kernel_compare --report OUT/results.jsonl --out docs/perf/x

Writes `results.jsonl` (one record per model, mode and backend) and `kernels.md`.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import gc
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

DEFAULT_MODELS = "hf_resnet,hf_vit,hf_gpt2,hf_bert,hf_llama"
BACKENDS = ("eager", "torch.compile", "ember", "ember-noreuse")
LEARNING_RATE = 1e-3

# Library kernel classes, by the launching ATen op or the kernel's name (first match wins).
LIBRARY_CLASSES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("layout conversion", re.compile(r"nchwToNhwc|nhwcToNchw|convertTensor", re.I)),
    ("attention", re.compile(r"scaled_dot_product|flash|fmha|attention", re.I)),
    ("convolution", re.compile(r"convolution|conv2d|cudnn|implicit_gemm|fprop|dgrad|wgrad", re.I)),
    (
        "matmul",
        re.compile(
            r"aten::(mm|addmm|bmm|baddbmm|matmul|linear|_scaled_mm)$|gemm|cutlass|xmma|cublas", re.I
        ),
    ),
    ("copy", re.compile(r"aten::(copy_|clone|contiguous|_to_copy|to)$|memcpy|memset", re.I)),
)
# torch.compile numbers its kernels (`_0`); ember names them by a 16-digit content digest
GENERATED_CAST = re.compile(
    r"triton_(poi_)?fused_(_to_copy|convert_element_type)(_\d+|_[0-9a-f]{16})?$"
)
GENERATED_REDUCTION = re.compile(
    r"^triton_(red|per)_|_(sum|amax|amin|argmax|argmin|prod|var|mean)", re.I
)


def classify(kernel: str, op: str) -> str:
    """A kernel's class: generated (Triton) kernels by what their names fuse, library kernels
    by the op that launched them or their own name."""
    if kernel.startswith("triton"):
        if GENERATED_CAST.match(kernel):
            return "generated cast"
        if GENERATED_REDUCTION.search(kernel):
            return "generated reduction"
        return "generated pointwise"
    for name, pattern in LIBRARY_CLASSES:
        if pattern.search(op) or pattern.search(kernel):
            return name
    return "other ATen" if op.startswith("aten::") else "other"


def short_kernel(name: str) -> str:
    """A kernel name without its parameter list, at most 140 characters (cuBLAS and ATen
    names run to hundreds; their template arguments say which variant ran)."""
    depth, end = 0, len(name)
    for position, char in enumerate(name):
        depth += (char == "<") - (char == ">")
        if char == "(" and depth == 0 and position > 0:
            end = position
            break
    text = name[:end].strip()
    return text.replace("void ", "", 1).strip()[:140]


# --------------------------------------------------------------------------- trace parsing


def kernels_from_trace(path: Path, steps: int) -> list[dict[str, Any]]:
    """Device activity of a Chrome trace grouped by (kernel, launching op): ms per step."""
    events = json.loads(path.read_text()).get("traceEvents", [])
    ops: dict[int, tuple[float, str]] = {}  # external id -> (duration, op name): innermost wins
    for event in events:
        if event.get("cat") != "cpu_op":
            continue
        external = event.get("args", {}).get("External id")
        if external is None:
            continue
        duration = float(event.get("dur", 0.0))
        known = ops.get(external)
        if known is None or duration < known[0]:
            ops[external] = (duration, str(event.get("name", "")))
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for event in events:
        if event.get("cat") not in ("kernel", "gpu_memcpy", "gpu_memset"):
            continue
        name = str(event.get("name", ""))
        external = event.get("args", {}).get("External id")
        op = ops.get(external, (0.0, ""))[1] if external is not None else ""
        if not op.startswith("aten::"):
            op = ""  # record_function ranges (the compiled graph's call) name no op
        key = (short_kernel(name), op)
        row = rows.setdefault(key, {"kernel": key[0], "op": op, "calls": 0, "us": 0.0})
        row["calls"] += 1
        row["us"] += float(event.get("dur", 0.0))
    result = []
    for row in rows.values():
        result.append(
            {
                "kernel": row["kernel"],
                "op": row["op"],
                "class": classify(row["kernel"], row["op"]),
                "calls_per_step": row["calls"] / steps,
                "ms_per_step": row["us"] / 1000.0 / steps,
            }
        )
    return sorted(result, key=lambda r: -r["ms_per_step"])


# --------------------------------------------------------------------------- one worker


def _compile(backend: str, module: torch.nn.Module) -> Callable[..., Any]:
    if backend == "eager":
        return module
    if backend == "torch.compile":
        return torch.compile(module)
    import ember
    from ember.inductor.backend import inductor

    # ember-noreuse: every buffer allocated fresh (what memory planning saves)
    os.environ["EMBER_INDUCTOR_REUSE_BUFFERS"] = "0" if backend == "ember-noreuse" else "1"
    # the function itself: a source tree has no entry points to find it by name
    return ember.compile(module, backend=inductor)


def _reset(backend: str) -> None:
    if backend == "torch.compile":
        torch._dynamo.reset()
    elif backend.startswith("ember"):
        import ember
        import ember.capture

        # compiled entries hold their module's weights: a survivor freed during the next
        # case would shrink that case's peak (measured above the memory allocated before it)
        reset = getattr(ember, "reset", None) or getattr(ember.capture, "reset", None)
        if reset is not None:
            reset()
    gc.collect()


def _median_ms(step: Callable[[], object], count: int) -> float:
    times = []
    for _ in range(count):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        step()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


@contextlib.contextmanager
def _graph_memory(records: list[dict[str, Any]]) -> Iterator[None]:
    """ember only: memory allocated at entry and exit of each compiled graph call, and the
    peak inside it (peak statistics are reset at every entry: diagnostic steps only)."""
    from ember.inductor.compiled import CompiledGraph

    original = CompiledGraph.__call__

    def measured(self: Any, *args: Any, **kwargs: Any) -> Any:
        torch.cuda.synchronize()
        entry = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        result = original(self, *args, **kwargs)
        torch.cuda.synchronize()
        records.append(
            {
                "graph": getattr(getattr(self, "_graph", None), "name", "?"),
                "entry_mib": entry / 2**20,
                "peak_mib": torch.cuda.max_memory_allocated() / 2**20,
                "exit_mib": torch.cuda.memory_allocated() / 2**20,
            }
        )
        return result

    CompiledGraph.__call__ = measured  # type: ignore[method-assign]
    try:
        yield
    finally:
        CompiledGraph.__call__ = original  # type: ignore[method-assign]


def _first_value(result: object, mode: str, module: torch.nn.Module) -> torch.Tensor:
    """What a step computed, on the CPU in float32: the logits, or the loss and gradients."""
    if mode == "inference":
        assert isinstance(result, torch.Tensor)
        return result.detach().float().flatten().cpu()
    assert isinstance(result, torch.Tensor)
    grads = [p.grad.detach().float().flatten() for p in module.parameters() if p.grad is not None]
    return torch.cat([result.detach().float().reshape(1), *grads]).cpu()


def measure(
    model: str,
    mode: str,
    dtype: str,
    backend: str,
    args: argparse.Namespace,
    hold: Any,
    reference: dict[str, torch.Tensor],
) -> dict[str, Any]:
    from benchmarks.case import autocast_for, make_step
    from benchmarks.models import build_workload, spec

    device = torch.device("cuda")
    record: dict[str, Any] = {"model": model, "mode": mode, "dtype": dtype, "backend": backend}
    workload = build_workload(spec(model), "gpu", mode)
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    base = torch.cuda.memory_allocated()
    module = copy.deepcopy(workload.module).to(device)
    inputs = tuple(t.to(device) for t in workload.inputs)
    optimizer = (
        torch.optim.SGD(module.parameters(), lr=LEARNING_RATE, momentum=0.9)
        if mode == "training"
        else None
    )
    started = time.monotonic()
    run = _compile(backend, module)
    if optimizer is not None:  # the first step's gradients, before any update
        optimizer.zero_grad(set_to_none=True)
        with autocast_for(device, dtype):
            loss = run(*inputs)
        loss.backward()
        value = _first_value(loss, mode, module)
        optimizer.step()
    else:
        with torch.no_grad(), autocast_for(device, dtype):
            value = _first_value(run(*inputs), mode, module)
    torch.cuda.synchronize()
    record["first_call_s"] = time.monotonic() - started
    if backend == "eager":
        reference[mode] = value
    elif mode in reference and reference[mode].shape == value.shape:
        expected = reference[mode]
        error = (value - expected).norm() / expected.norm().clamp_min(1e-12)
        record["rel_error_vs_eager"] = float(error)
    del value
    step = make_step(run, inputs, mode, dtype, device, optimizer)
    with hold():
        for _ in range(args.warmup):
            step()
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        record["wall_ms"] = _median_ms(step, args.steps)
        record["peak_mib"] = (torch.cuda.max_memory_allocated() - base) / 2**20
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(args.profile_steps):
                step()
            torch.cuda.synchronize()
        with tempfile.TemporaryDirectory() as folder:
            trace = Path(folder) / "trace.json"
            prof.export_chrome_trace(str(trace))
            kernels = kernels_from_trace(trace, args.profile_steps)
        record["kernels"] = kernels
        record["gpu_ms"] = sum(k["ms_per_step"] for k in kernels)
        if backend == "ember":
            graphs: list[dict[str, Any]] = []
            with _graph_memory(graphs):
                step()
            record["graph_memory"] = graphs
    del run, step, optimizer, module, inputs
    _reset(backend)
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    return record


def worker(args: argparse.Namespace) -> None:
    from benchmarks.device_lock import MeasurementLock

    lock = MeasurementLock(Path(args.lock), pause_others=True, drain_s=0.1)
    lock.register()
    out = Path(args.out) / "results.jsonl"
    reference: dict[str, torch.Tensor] = {}
    for mode in args.modes.split(","):
        backends = args.backends.split(",")
        if mode in args.noreuse_modes.split(","):
            backends.append("ember-noreuse")
        for backend in backends:
            started = time.monotonic()
            try:
                record = measure(args.worker, mode, args.dtype, backend, args, lock.hold, reference)
                record["status"] = "ok"
            except Exception as error:  # recorded; the next case runs
                record = {
                    "model": args.worker,
                    "mode": mode,
                    "dtype": args.dtype,
                    "backend": backend,
                    "status": "error",
                    "error": f"{type(error).__name__}: {error}"[:600],
                    "traceback": traceback.format_exc()[-2000:],
                }
                torch.cuda.empty_cache()
            record["case_s"] = time.monotonic() - started
            with out.open("a") as stream:
                stream.write(json.dumps(record) + "\n")
            keys = ("model", "mode", "backend", "status", "gpu_ms", "wall_ms", "peak_mib")
            keys += ("first_call_s", "rel_error_vs_eager", "error")
            summary = {k: record.get(k) for k in keys}
            print(json.dumps(summary), flush=True)


# --------------------------------------------------------------------------- runner


def environment() -> dict[str, Any]:
    info: dict[str, Any] = {"torch": torch.__version__, "python": sys.version.split()[0]}
    with contextlib.suppress(Exception):
        import triton

        info["triton"] = triton.__version__
    if torch.cuda.is_available():
        info["device"] = torch.cuda.get_device_name()
    info["commit"] = os.environ.get("EMBER_BENCH_COMMIT", "")
    info["date"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    return info


def run_all(args: argparse.Namespace) -> Path:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "environment.json").write_text(json.dumps(environment()))
    lock = out / "measure.lock"
    pending = [m for m in args.models.split(",") if m]
    running: list[tuple[str, subprocess.Popen[bytes], float]] = []
    deadline = time.monotonic() + args.budget
    logs = out / "logs"
    logs.mkdir(exist_ok=True)
    while pending or running:
        while pending and len(running) < args.jobs:
            model = pending.pop(0)
            command = [
                sys.executable, "-m", "benchmarks.kernel_compare", "--worker", model,
                "--out", str(out), "--lock", str(lock), "--modes", args.modes,
                "--backends", args.backends, "--dtype", args.dtype, "--steps", str(args.steps),
                "--warmup", str(args.warmup), "--profile-steps", str(args.profile_steps),
                "--noreuse-modes", args.noreuse_modes,
            ]  # fmt: skip
            log = (logs / f"{model}.log").open("wb")
            process = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
            running.append((model, process, time.monotonic()))
        time.sleep(1.0)
        for entry in list(running):
            model, process, _ = entry
            if process.poll() is not None:
                running.remove(entry)
                print(f"{model}: exit {process.returncode}", flush=True)
            elif time.monotonic() > deadline:
                os.killpg(process.pid, 9)
                running.remove(entry)
                print(f"{model}: killed at the budget", flush=True)
    results = out / "results.jsonl"
    if results.exists():
        (out / "kernels.md").write_text(report([results], _environment(out)))
    return results


# --------------------------------------------------------------------------- report


def _load(paths: list[Path]) -> list[dict[str, Any]]:
    records = []
    for path in paths:
        for line in path.read_text().splitlines():
            if line.strip():
                records.append(json.loads(line))
    return records


def _fmt(value: float | None, digits: int = 2) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def _error(value: float | None) -> str:
    return "–" if value is None else f"{value:.1e}"


def _ratio(a: float | None, b: float | None) -> str:
    return "–" if not a or not b else f"{a / b:.2f}x"


def _environment(folder: Path) -> dict[str, Any]:
    path = folder / "environment.json"
    return json.loads(path.read_text()) if path.exists() else {}


def report(paths: list[Path], env: dict[str, Any] | None = None, top: int = 12) -> str:
    records = _load(paths)
    by_case: dict[tuple[str, str], dict[str, dict[str, Any]]] = defaultdict(dict)
    for record in records:
        by_case[(record["model"], record["mode"])][record["backend"]] = record
    lines = [
        "# Kernel comparison: eager, torch.compile and ember",
        "",
        "GPU ms: kernel, memcpy and memset time per step (profiler); wall ms: median step "
        "(CUDA events, no profiler); peak: max allocated over the timed steps minus what was "
        "allocated before the module was built. Ratios are ember / torch.compile (lower is "
        "better for both). Error: relative L2 of the first step's logits (inference) or loss and "
        "gradients (training) against eager's.",
        "",
        "Environment: " + ", ".join(f"{k} {v}" for k, v in (env or {}).items() if v),
        "",
        "| model | mode | eager GPU ms | torch.compile GPU ms | ember GPU ms | ember/tc GPU | "
        "eager wall ms | tc wall ms | ember wall ms | eager peak MiB | tc peak MiB | "
        "ember peak MiB | ember/tc peak | ember peak, no reuse | tc error | ember error |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- "
        "| --- | --- |",
    ]
    for (model, mode), cases in sorted(by_case.items()):

        def get(backend: str, key: str, cases: dict[str, dict[str, Any]] = cases) -> Any:
            return cases.get(backend, {}).get(key)

        lines.append(
            f"| {model} | {mode} | {_fmt(get('eager', 'gpu_ms'))} | "
            f"{_fmt(get('torch.compile', 'gpu_ms'))} | {_fmt(get('ember', 'gpu_ms'))} | "
            f"{_ratio(get('ember', 'gpu_ms'), get('torch.compile', 'gpu_ms'))} | "
            f"{_fmt(get('eager', 'wall_ms'))} | {_fmt(get('torch.compile', 'wall_ms'))} | "
            f"{_fmt(get('ember', 'wall_ms'))} | {_fmt(get('eager', 'peak_mib'), 0)} | "
            f"{_fmt(get('torch.compile', 'peak_mib'), 0)} | {_fmt(get('ember', 'peak_mib'), 0)} | "
            f"{_ratio(get('ember', 'peak_mib'), get('torch.compile', 'peak_mib'))} | "
            f"{_fmt(get('ember-noreuse', 'peak_mib'), 0)} | "
            f"{_error(get('torch.compile', 'rel_error_vs_eager'))} | "
            f"{_error(get('ember', 'rel_error_vs_eager'))} |"
        )
    errors = [r for r in records if r.get("status") != "ok"]
    if errors:
        lines += ["", "Errors:", ""]
        lines += [f"- {r['model']} {r['mode']} {r['backend']}: {r.get('error')}" for r in errors]
    for (model, mode), cases in sorted(by_case.items()):
        lines += ["", f"## {model} {mode}", "", "By class (ms per step):", ""]
        backends = [b for b in BACKENDS[:3] if cases.get(b, {}).get("status") == "ok"]
        if not backends:
            lines.append("No backend ran.")
            continue
        totals: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        for backend in backends:
            for kernel in cases[backend]["kernels"]:
                totals[kernel["class"]][backend] += kernel["ms_per_step"]
        lines.append("| class | " + " | ".join(backends) + " |")
        lines.append("| --- |" + " --- |" * len(backends))
        for name, row in sorted(totals.items(), key=lambda item: -max(item[1].values())):
            lines.append(
                f"| {name} | " + " | ".join(_fmt(row.get(b, 0.0), 3) for b in backends) + " |"
            )
        for backend in backends:
            kernels = cases[backend]["kernels"]
            lines += [
                "",
                f"Top kernels, {backend} ({len(kernels)} distinct):",
                "",
                "| ms/step | calls/step | class | launching op | kernel |",
                "| --- | --- | --- | --- | --- |",
            ]
            for kernel in kernels[:top]:
                lines.append(
                    f"| {kernel['ms_per_step']:.3f} | {kernel['calls_per_step']:g} | "
                    f"{kernel['class']} | {kernel['op'] or '–'} | `{kernel['kernel']}` |"
                )
        graphs = cases.get("ember", {}).get("graph_memory")
        if graphs:
            lines += [
                "",
                "ember graphs' memory (MiB: allocated at entry, peak inside, at exit):",
                "",
            ]
            for graph in graphs:
                lines.append(
                    f"- {graph['graph']}: {graph['entry_mib']:.0f} / {graph['peak_mib']:.0f} / "
                    f"{graph['exit_mib']:.0f}"
                )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default=DEFAULT_MODELS)
    parser.add_argument("--modes", default="inference,training")
    parser.add_argument("--backends", default=",".join(BACKENDS[:3]))
    parser.add_argument("--dtype", default="bf16", choices=("bf16", "float32"))
    parser.add_argument("--steps", type=int, default=15)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--profile-steps", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=3)
    parser.add_argument(
        "--noreuse-modes",
        default="",
        help="modes that also run ember with EMBER_INDUCTOR_REUSE_BUFFERS=0 (ember-noreuse)",
    )
    parser.add_argument("--budget", type=float, default=540.0)
    parser.add_argument("--out", default="kernel-compare")
    parser.add_argument("--report", nargs="*", help="results.jsonl files: write kernels.md only")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--lock", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.report:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        folder = Path(args.report[0]).parent
        (out / "kernels.md").write_text(
            report([Path(p) for p in args.report], _environment(folder))
        )
        return
    if args.worker:
        worker(args)
        return
    run_all(args)


if __name__ == "__main__":
    main()
