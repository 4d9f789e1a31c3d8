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

`--compile-mode` (default, reduce-overhead, max-autotune) is passed to both compilers; under
the CUDA-graph modes every timed step starts with the compiler's step marker, and the report
adds each compiler's geomean speedup over eager per mode and its first-call seconds (compile
and autotuning). Models run in separate processes, or one per model and mode with
`--split-modes` (benchmarks/kernel_compare_runner.py: `--jobs` at once, a `--budget` after
which cases still running are killed and recorded); measurement windows are exclusive
(benchmarks' `MeasurementLock`, which pauses the other workers), compiles overlap.

    python -m benchmarks.kernel_compare --models hf_gpt2,hf_resnet --out OUT
    python -m benchmarks.kernel_compare --compile-mode max-autotune --split-modes --jobs 10 ...
    python -m benchmarks.kernel_compare --report OUT/results.jsonl --out docs/perf/x

Writes `results.jsonl` (one record per model, mode and backend), `kernels.md` and
`workers.log` (the last lines of each worker's output), and prints the summary at the end.
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
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

DEFAULT_MODELS = "hf_resnet,hf_vit,hf_gpt2,hf_bert,hf_llama"
BACKENDS = ("eager", "torch.compile", "ember", "ember-noreuse")
COMPILERS = ("torch.compile", "ember")
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune")
CUDAGRAPH_MODES = frozenset({"reduce-overhead", "max-autotune"})  # both compilers replay graphs
LEARNING_RATE = 1e-3

# Library kernel classes, by the launching ATen op or the kernel's name (first match wins).
LIBRARY_CLASSES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("layout conversion", re.compile(r"nchwToNhwc|nhwcToNchw|convertTensor", re.I)),
    ("attention", re.compile(r"scaled_dot_product|flash|fmha|attention|sdpa|cudnn::fusion", re.I)),
    ("convolution", re.compile(r"convolution|conv2d|cudnn|implicit_gemm|fprop|dgrad|wgrad", re.I)),
    (
        "matmul",
        re.compile(
            r"aten::(mm|addmm|bmm|baddbmm|matmul|linear|_scaled_mm)$|gemm|cutlass|xmma|cublas|nvjet",
            re.I,
        ),
    ),
    ("copy", re.compile(r"aten::(copy_|clone|contiguous|_to_copy|to)$|memcpy|memset", re.I)),
)
# torch.compile numbers its kernels (`_0`); ember names them by a 16-digit content digest
GENERATED_CAST = re.compile(
    r"triton_(poi_)?fused_(_to_copy|convert_element_type)(_\d+|_[0-9a-f]{16})?$"
)
ATEN_KERNEL = re.compile(r"(void )?(at::native::|at_cuda_detail::)")
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
    # a replayed CUDA graph's kernels have no launching op: ATen's own go by their namespace
    return "other ATen" if op.startswith("aten::") or ATEN_KERNEL.match(kernel) else "other"


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


def trace_events(path: Path) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = json.loads(path.read_text()).get("traceEvents", [])
    return events


def kernels_from_trace(path: Path, steps: int) -> list[dict[str, Any]]:
    """Device activity of a Chrome trace grouped by (kernel, launching op): ms per step."""
    return kernels_from_events(trace_events(path), steps)


def graph_launches(events: list[dict[str, Any]], steps: int) -> float:
    """CUDA graph launches per step (runtime or driver API calls): under the CUDA-graph modes
    the kernels of a replay are recorded like any other (CUPTI traces graph kernels), and
    this count says that the steps did replay graphs."""
    calls = sum(
        1
        for event in events
        if event.get("cat") in ("cuda_runtime", "cuda_driver")
        and "GraphLaunch" in str(event.get("name", ""))
    )
    return calls / steps


def kernels_from_events(events: list[dict[str, Any]], steps: int) -> list[dict[str, Any]]:
    """`kernels_from_trace` over a trace's events."""
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


def mode_argument(compile_mode: str) -> str | None:
    """The `mode=` both `torch.compile` and `ember.compile` get: None (their default, as when
    it is not passed) in the default mode."""
    return None if compile_mode == "default" else compile_mode


def _compile(backend: str, module: torch.nn.Module, compile_mode: str) -> Callable[..., Any]:
    """The module compiled by `backend` with `compile_mode`."""
    mode = mode_argument(compile_mode)
    if backend == "eager":
        return module
    if backend == "torch.compile":
        return torch.compile(module, mode=mode)
    import ember
    from ember.inductor.backend import inductor

    # ember-noreuse: every buffer allocated fresh (what memory planning saves)
    os.environ["EMBER_INDUCTOR_REUSE_BUFFERS"] = "0" if backend == "ember-noreuse" else "1"
    # the function itself: a source tree has no entry points to find it by name
    return ember.compile(module, backend=inductor, mode=mode)


def step_marker(backend: str, compile_mode: str) -> Callable[[], None] | None:
    """What starts a step of `backend`'s CUDA graph trees (torch.compiler's or ember's
    `cudagraph_mark_step_begin`), or None where no graphs replay. Both trees tell steps apart
    on their own (a forward after the backward, the first graph called again); the marker
    makes it explicit, as both compilers' documentation asks of a loop."""
    if compile_mode not in CUDAGRAPH_MODES or backend == "eager":
        return None
    if backend == "torch.compile":
        return torch.compiler.cudagraph_mark_step_begin
    import ember

    marker: Callable[[], None] = ember.cudagraph_mark_step_begin
    return marker


def marked_step(
    step: Callable[[], object], marker: Callable[[], None] | None
) -> Callable[[], object]:
    """`step` preceded by `marker` (None: `step` itself)."""
    if marker is None:
        return step

    def marked() -> object:
        marker()
        return step()

    return marked


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


def _no_pause(start: float, end: float) -> float:
    return 0.0


def measure(
    model: str,
    mode: str,
    dtype: str,
    backend: str,
    args: argparse.Namespace,
    hold: Any,
    reference: dict[str, torch.Tensor],
    paused: Callable[[float, float], float] = _no_pause,
    timed: bool = True,
) -> dict[str, Any]:
    """One case. `paused(start, end)`: seconds other workers' measurements paused this
    process between two monotonic times (left out of `compile_s`). Untimed: the first step
    only (eager's, for a worker's error reference), nothing measured under the lock."""
    from benchmarks.case import autocast_for, make_step
    from benchmarks.models import build_workload, spec

    device = torch.device("cuda")
    compile_mode = args.compile_mode
    record: dict[str, Any] = {"model": model, "mode": mode, "dtype": dtype, "backend": backend}
    record["compile_mode"] = compile_mode
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
    run = _compile(backend, module, compile_mode)
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
    ended = time.monotonic()
    record["first_call_s"] = ended - started
    record["paused_s"] = paused(started, ended)
    record["compile_s"] = record["first_call_s"] - record["paused_s"]
    if backend == "eager":
        reference[mode] = value
    elif mode in reference and reference[mode].shape == value.shape:
        expected = reference[mode]
        error = (value - expected).norm() / expected.norm().clamp_min(1e-12)
        record["rel_error_vs_eager"] = float(error)
    del value
    if not timed:
        del run, optimizer, module, inputs
        torch.cuda.empty_cache()
        return record
    step = marked_step(
        make_step(run, inputs, mode, dtype, device, optimizer), step_marker(backend, compile_mode)
    )
    if backend == "ember":
        # the C tensor guards build in the background on a machine's first run: ember's
        # steps are timed with them, as `cudagraph_suite` and `host_profile` time them
        from ember.capture.guards.native import NATIVE

        record["guards_in_c"] = NATIVE.wait(300) is not None
    with hold():
        warming = time.monotonic()
        for _ in range(args.warmup):  # under CUDA graphs: warm-up runs and recording
            step()
        torch.cuda.synchronize()
        record["warmup_s"] = time.monotonic() - warming
        torch.cuda.reset_peak_memory_stats()
        record["wall_ms"] = _median_ms(step, args.steps)
        record["peak_mib"] = (torch.cuda.max_memory_allocated() - base) / 2**20
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(args.profile_steps):
                step()
            torch.cuda.synchronize()
        if backend == "ember" and compile_mode not in CUDAGRAPH_MODES:
            # (it synchronizes inside each graph call: not while graphs record or replay)
            graphs: list[dict[str, Any]] = []
            with _graph_memory(graphs):
                step()
            record["graph_memory"] = graphs
    with tempfile.TemporaryDirectory() as folder:  # reading the trace needs no lock
        trace = Path(folder) / "trace.json"
        prof.export_chrome_trace(str(trace))
        events = trace_events(trace)
    kernels = kernels_from_events(events, args.profile_steps)
    record["kernels"] = kernels
    record["gpu_ms"] = sum(k["ms_per_step"] for k in kernels)
    record["graph_launches_per_step"] = graph_launches(events, args.profile_steps)
    del events, prof
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
    print(f"worker {args.worker} {args.modes} pid {os.getpid()}", flush=True)
    reference: dict[str, torch.Tensor] = {}
    for mode in args.modes.split(","):
        backends = args.backends.split(",")
        if mode in args.noreuse_modes.split(","):
            backends.append("ember-noreuse")
        if "eager" not in backends:  # a compiler's own worker (`--split-backends`)
            measure(args.worker, mode, args.dtype, "eager", args, lock.hold, reference,
                    timed=False)  # fmt: skip
        for backend in backends:
            started = time.monotonic()
            try:
                record = measure(
                    args.worker, mode, args.dtype, backend, args, lock.hold, reference,
                    lock.paused_between,
                )  # fmt: skip
                record["status"] = "ok"
            except Exception as error:  # recorded; the next case runs
                record = {
                    "model": args.worker,
                    "mode": mode,
                    "dtype": args.dtype,
                    "backend": backend,
                    "compile_mode": args.compile_mode,
                    "status": "error",
                    "error": f"{type(error).__name__}: {error}"[:600],
                    "traceback": traceback.format_exc()[-2000:],
                }
                torch.cuda.empty_cache()
            record["case_s"] = time.monotonic() - started
            with out.open("a") as stream:
                stream.write(json.dumps(record) + "\n")
            keys = ["model", "mode", "backend", "status", "gpu_ms", "wall_ms", "peak_mib"]
            keys += ["first_call_s", "compile_s", "rel_error_vs_eager", "error"]
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


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default=DEFAULT_MODELS)
    parser.add_argument("--modes", default="inference,training")
    parser.add_argument("--backends", default=",".join(BACKENDS[:3]))
    parser.add_argument("--dtype", default="bf16", choices=("bf16", "float32"))
    parser.add_argument("--steps", type=int, default=15)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--profile-steps", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=3, help="worker processes at once")
    parser.add_argument(
        "--compile-mode",
        default="default",
        choices=COMPILE_MODES,
        help="mode= of both torch.compile and ember.compile (default: none passed)",
    )
    parser.add_argument(
        "--split-modes",
        action="store_true",
        help="one worker per model and mode (each runs eager first) instead of one per model",
    )
    parser.add_argument(
        "--split-backends",
        action="store_true",
        help="one worker per model, mode and backend (each compiler's runs eager's first step "
        "for its error reference)",
    )
    parser.add_argument(
        "--compile-threads",
        type=int,
        default=0,
        help="each worker's compile processes (TORCHINDUCTOR_ and EMBER_COMPILE_THREADS)",
    )
    parser.add_argument(
        "--log-lines", type=int, default=40, help="each worker's last lines in workers.log"
    )
    parser.add_argument(
        "--noreuse-modes",
        default="",
        help="modes that also run ember with EMBER_INDUCTOR_REUSE_BUFFERS=0 (ember-noreuse)",
    )
    parser.add_argument(
        "--budget",
        type=float,
        default=540.0,
        help="seconds; workers still running then are killed, their cases recorded as killed",
    )
    parser.add_argument("--out", default="kernel-compare")
    parser.add_argument("--report", nargs="*", help="results.jsonl files: write kernels.md only")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--lock", help=argparse.SUPPRESS)
    return parser


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    if args.report:
        from benchmarks.kernel_compare_report import environment_of, report

        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        folder = Path(args.report[0]).parent
        (out / "kernels.md").write_text(
            report([Path(p) for p in args.report], environment_of(folder))
        )
        return
    if args.worker:
        worker(args)
        return
    from benchmarks.kernel_compare_runner import run_all

    run_all(args)


if __name__ == "__main__":
    main()
