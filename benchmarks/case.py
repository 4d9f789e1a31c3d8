"""One measured case: a model, a mode, a dtype and a backend, run and turned into a record.

The float64 reference is computed once per model and mode (a `Reference`, shared by both
dtypes) and eager's own first-step values once per dtype (a `Setup`, shared by every backend
of that group). A backend's first step is both its cold compile and its accuracy sample; then
it warms up, is timed, has its peak memory taken, and (optionally) is compiled again after a
reset to time a warm compile. A training case of a model with dropout or stochastic depth
takes its accuracy sample with them off, then compiles the model with them on, compares
its dropout statistics with eager's (benchmarks/dropout.py) and is timed that way. `hold` (the measurement lock) is held around the reference and
eager values, eager's first call, and warm-up, timing and memory; never around a compile.
"""

from __future__ import annotations

import contextlib
import copy
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from benchmarks import dropout, memory
from benchmarks.accuracy import compare
from benchmarks.backends import Backend
from benchmarks.models import Workload, build_workload, spec
from benchmarks.timing import interleaved_medians, median_step_seconds, synchronize, timed_call

AUTOCAST = {"float32": None, "bf16": torch.bfloat16}
LEARNING_RATE = 1e-4


@dataclass(frozen=True)
class Settings:
    """How hard to measure: steps, warm-up, the time allowed for timing, warm compiles."""

    steps: int = 20
    warmup: int = 3
    timing_allowance_s: float = 15.0
    warm_compile: bool = True


Hold = Callable[[], AbstractContextManager[None]]
Paused = Callable[[float, float], float]  # seconds other workers paused us in a window


def _never_paused(start: float, end: float) -> float:
    return 0.0


@dataclass
class Reference:
    """A model's pristine workload and its float64 first-step values, for one mode."""

    key: tuple[str, str, str, str]  # model, size, mode, device
    workload: Workload  # pristine, on CPU, never run
    values: dict[str, torch.Tensor]  # float64, on the device
    regularized: Workload | None = None  # training with dropout on, same weights; pristine


@dataclass
class Setup:
    """What every backend of one (model, mode, dtype) group is compared against."""

    key: tuple[str, str, str, str, str]
    workload: Workload  # pristine, on CPU, never run
    reference: dict[str, torch.Tensor]  # float64, on the device
    eager: dict[str, torch.Tensor]  # eager at the case dtype, on the device
    baseline: dict[str, float] = field(default_factory=dict)  # eager median_s, peak bytes
    regularized: Workload | None = None  # as Reference.regularized
    eager_dropout: dropout.Statistics | None = None  # eager's steps with dropout on


def _on(device: torch.device, tensors: tuple[torch.Tensor, ...], double: bool = False) -> tuple:
    moved = []
    for tensor in tensors:
        tensor = tensor.to(device)
        moved.append(tensor.double() if double and tensor.is_floating_point() else tensor)
    return tuple(moved)


@contextlib.contextmanager
def autocast_for(device: torch.device, dtype: str) -> Iterator[None]:
    """Autocast to the case's dtype ("bf16", ...), or nothing for float32 and float64."""
    target = AUTOCAST[dtype]
    if target is None:
        yield
    else:
        with torch.autocast(device_type=device.type, dtype=target):
            yield


def _first_values(
    run: Callable[..., Any], module: nn.Module, inputs: tuple, mode: str, autocast: Any
) -> dict[str, torch.Tensor]:
    """Outputs (inference) or loss and gradients (training) of one step, kept on the device."""
    if mode == "inference":
        with torch.no_grad(), autocast:
            output = run(*inputs)
        return {"output": output.detach()}
    for parameter in module.parameters():
        parameter.grad = None
    with autocast:
        loss = run(*inputs)
    loss.backward()
    gradients = [
        (p.grad if p.grad is not None else torch.zeros_like(p)).detach().flatten()
        for p in module.parameters()
    ]
    return {"loss": loss.detach(), "gradients": torch.cat(gradients)}


def prepare_reference(
    model: str, size: str, mode: str, device: torch.device, hold: Hold = contextlib.nullcontext
) -> Reference:
    """Builds the pristine workload and computes its float64 first-step values."""
    entry = spec(model)
    workload = build_workload(entry, size, mode)
    regularized = (
        build_workload(entry, size, mode, dropout=True)
        if mode == "training" and entry.dropout
        else None
    )
    with hold():  # device work: it must not overlap another worker's measurement
        reference_module = copy.deepcopy(workload.module).to(device).double()
        reference_inputs = _on(device, workload.inputs, double=True)
        values = _first_values(
            reference_module, reference_module, reference_inputs, mode, contextlib.nullcontext()
        )
        del reference_module, reference_inputs
        memory.release(device)
    return Reference((model, size, mode, str(device)), workload, values, regularized)


def prepare_setup(
    reference: Reference, dtype: str, device: torch.device, hold: Hold = contextlib.nullcontext
) -> Setup:
    """Eager's first-step values at `dtype`, beside the shared float64 reference."""
    model, size, mode, _ = reference.key
    workload = reference.workload
    with hold():
        eager_module = copy.deepcopy(workload.module).to(device)
        eager = _first_values(
            eager_module,
            eager_module,
            _on(device, workload.inputs),
            mode,
            autocast_for(device, dtype),
        )
        del eager_module
        statistics = None
        if reference.regularized is not None:
            regularized = copy.deepcopy(reference.regularized.module).to(device)
            statistics = dropout.sample(
                regularized,
                regularized,
                _on(device, reference.regularized.inputs),
                lambda: autocast_for(device, dtype),
            )
            del regularized
        memory.release(device)
    return Setup(
        (model, size, mode, dtype, str(device)),
        workload,
        reference.values,
        eager,
        regularized=reference.regularized,
        eager_dropout=statistics,
    )


def make_step(
    run: Callable[..., Any],
    inputs: tuple,
    mode: str,
    dtype: str,
    device: torch.device,
    optimizer: torch.optim.Optimizer | None,
) -> Callable[[], object]:
    """One timed step: a no-grad forward, or forward, backward and the optimizer's step."""
    if mode == "inference":

        def inference_step() -> object:
            with torch.no_grad(), autocast_for(device, dtype):
                return run(*inputs)

        return inference_step
    assert optimizer is not None

    def training_step() -> object:
        optimizer.zero_grad(set_to_none=True)
        with autocast_for(device, dtype):
            loss = run(*inputs)
        loss.backward()
        optimizer.step()
        return loss

    return training_step


def run_case(
    setup: Setup,
    backend: Backend,
    device: torch.device,
    settings: Settings,
    hold: Hold = contextlib.nullcontext,
    paused: Paused = _never_paused,
    partners: dict[str, Callable[[], object]] | None = None,
) -> dict[str, Any]:
    """Measures `backend` on `setup`'s workload; returns the record fields it measured.

    Compile times leave out the time other workers' measurements paused this process.
    With `partners` (the interleaved runner's steps of the group's earlier backends, eager
    first, by backend name), the steps are timed in turn with theirs, round by round; their
    medians over the same rounds go into `interleaved_ms`, and this backend's step is added
    to `partners`, still compiled (not reset), for the group's later backends."""
    _, _, mode, dtype, _ = setup.key
    memory.release(device)
    base_bytes = torch.cuda.memory_allocated(device) if device.type == "cuda" else 0
    module = copy.deepcopy(setup.workload.module).to(device)
    inputs = _on(device, setup.workload.inputs)
    optimizer = (
        torch.optim.SGD(module.parameters(), lr=LEARNING_RATE, momentum=0.9)
        if mode == "training"
        else None
    )
    record: dict[str, Any] = {}

    # A compiling first call runs unlocked (its time is the cold compile; it may overlap other
    # workers' compiles); eager's first call is only device work, so it holds the lock.
    first_hold = hold if backend.kind == "baseline" else contextlib.nullcontext
    values: dict[str, torch.Tensor] = {}
    with first_hold():
        synchronize(device)
        start = time.monotonic()
        run = backend.compile(module)
        values.update(_first_values(run, module, inputs, mode, autocast_for(device, dtype)))
        if optimizer is not None:
            optimizer.step()
        synchronize(device)
        end = time.monotonic()
    # compile and the first step, device work included, pauses by other workers left out
    first_call_s = end - start - paused(start, end)
    counts = backend.counts()
    record.update(first_call_s=first_call_s, graphs=counts.graphs, graph_breaks=counts.breaks)

    comparison = compare(values, setup.eager, setup.reference, dtype)
    record.update(
        accuracy_passed=comparison.passed,
        accuracy_error=comparison.error,
        eager_accuracy_error=comparison.eager_error,
        max_abs_vs_eager=comparison.max_abs_vs_eager,
        accuracy_detail=comparison.detail,
    )
    values.clear()  # so the first step's copies do not count towards this backend's peak

    if setup.regularized is not None and setup.eager_dropout is not None:
        # Dropout on from here: its statistics are checked, and it is what gets timed.
        del run, optimizer, module
        memory.release(device)
        module = copy.deepcopy(setup.regularized.module).to(device)
        inputs = _on(device, setup.regularized.inputs)
        optimizer = torch.optim.SGD(module.parameters(), lr=LEARNING_RATE, momentum=0.9)
        with first_hold():
            start = time.monotonic()
            run = backend.compile(module)
            statistics = dropout.sample(run, module, inputs, lambda: autocast_for(device, dtype))
            synchronize(device)
            end = time.monotonic()
        verdict = dropout.compare_statistics(statistics, setup.eager_dropout)
        record.update(
            dropout_first_call_s=end - start - paused(start, end),
            dropout_passed=verdict.passed,
            dropout_detail=verdict.detail,
        )

    step = make_step(run, inputs, mode, dtype, device, optimizer)
    with hold():  # no other worker runs device work while this one times and takes memory
        for _ in range(settings.warmup):
            step()
        if partners:  # eager and the earlier backends in the same rounds
            medians, steps = interleaved_medians(
                {**partners, backend.name: step},
                device,
                settings.steps,
                settings.timing_allowance_s,
            )
            median_s = medians.pop(backend.name)
            record["interleaved_ms"] = {name: s * 1000.0 for name, s in medians.items()}
            memory.start_peak(device)
            step()
        else:
            memory.start_peak(device)
            median_s, steps = median_step_seconds(
                step, device, settings.steps, settings.timing_allowance_s
            )
        if device.type == "cuda":
            peak = memory.cuda_peak_bytes(device) - base_bytes
        else:
            state = [t for s in (optimizer.state.values() if optimizer else []) for t in s.values()]
            resident = memory.resident_bytes(
                [*module.parameters(), *module.buffers(), *inputs]
                + [t for t in state if isinstance(t, torch.Tensor)]
            )
            peak = resident + memory.cpu_step_peak_bytes(step)
    record.update(
        median_ms=median_s * 1000.0,
        steps=steps,
        peak_memory_bytes=int(peak),
        compile_cold_s=max(first_call_s - median_s, 0.0) if backend.kind != "baseline" else None,
    )

    if settings.warm_compile and backend.kind != "baseline":
        backend.reset()
        warm_run = backend.compile(module)
        warm_step = make_step(warm_run, inputs, mode, dtype, device, optimizer)
        warm_start = time.monotonic()
        warm_first_s = timed_call(warm_step, device)
        warm_first_s -= paused(warm_start, time.monotonic())
        record["compile_warm_s"] = max(warm_first_s - median_s, 0.0)
        step = warm_step  # compiled again after the reset: what later rounds run
    if partners is None:
        backend.reset()
    else:
        partners[backend.name] = step
    memory.release(device)
    return record
