"""The worker process: runs cases sent by the runner and answers each with its record.

Protocol: the runner writes one JSON task per line on stdin; the worker answers on its
original stdout with one JSON line per task (`{"id": ..., "record": {...}}`), after a
`{"ready": true}` line once warmed up, and a `{"id": ..., "lock_wait_s": s}` line whenever
a case waited for the measurement lock (the runner does not charge waits to the case's limits).
Anything else printed goes to stderr (the run log). Running in its own process lets the
runner enforce time limits and survive crashes; several workers may run at once (`--jobs`).
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import IO, Any

import torch

from benchmarks import backends as backend_registry
from benchmarks import failures
from benchmarks.case import (
    Reference,
    Settings,
    Setup,
    prepare_reference,
    prepare_setup,
    run_case,
)
from benchmarks.device_lock import MeasurementLock

ERROR_CHARACTERS = 3000
DRAIN_S = 0.1  # longer than the GPU work one worker queues between synchronizations


def _error_text(error: BaseException) -> str:
    text = "".join(traceback.format_exception(error))
    summary = f"{type(error).__name__}: {error}".strip()
    return (summary + "\n" + text[-ERROR_CHARACTERS:])[: ERROR_CHARACTERS + len(summary)]


def _warm_up(device: torch.device, backend_names: list[str]) -> None:
    """Pays one-time compiler start-up (imports, compile workers) outside any measured case."""
    if not any(name.startswith(backend_registry.TORCH_COMPILE) for name in backend_names):
        return
    function = torch.compile(lambda x: (x.sin() + 1).sum())
    function(torch.randn(8, device=device))
    torch._dynamo.reset()


class Worker:
    """Holds the current model's float64 reference (shared by its dtypes) and the current
    group's setup (shared by its backends)."""

    def __init__(
        self,
        device: torch.device,
        settings: Settings,
        lock: MeasurementLock,
        interleave: bool = False,
    ) -> None:
        self.device = device
        self.settings = settings
        self.lock = lock
        self.reference: Reference | None = None
        self.setup: Setup | None = None
        # with `interleave`: the current group's measured steps, kept compiled, by backend
        self.partners: dict[str, Any] | None = {} if interleave else None

    def run(self, task: dict[str, Any]) -> dict[str, Any]:
        key = (task["model"], task["size"], task["mode"], task["dtype"], str(self.device))
        record: dict[str, Any] = {}
        start = time.perf_counter()
        self.lock.reset_counters()
        try:
            backend = backend_registry.lookup(task["backend"])
            record["backend_kind"] = backend.kind
            if backend.unavailable is not None:
                record.update(status="not_available", error=backend.unavailable)
                return record
            if self.setup is None or self.setup.key != key:
                self.setup = None
                self._release_partners()
                reference_key = (task["model"], task["size"], task["mode"], str(self.device))
                if self.reference is None or self.reference.key != reference_key:
                    self.reference = None
                    self.reference = prepare_reference(
                        *reference_key[:3], self.device, self.lock.hold
                    )
                self.setup = prepare_setup(
                    self.reference, task["dtype"], self.device, self.lock.hold
                )
            record["description"] = self.setup.workload.description
            record.update(
                run_case(
                    self.setup,
                    backend,
                    self.device,
                    self.settings,
                    self.lock.hold,
                    self.lock.paused_between,
                    self.partners,
                )
            )
            failed = failures.accuracy_class(record)
            record["status"] = "pass" if failed is None else "fail_accuracy"
            if failed is not None:
                record["error_class"] = failed
            if backend.kind == "baseline":
                self.setup.baseline = {
                    "median_ms": record["median_ms"],
                    "peak_memory_bytes": record["peak_memory_bytes"],
                }
            self._relate(record)
        except Exception as error:  # every failure is a result, never a crash
            error_class = failures.exception_class(error)
            record.update(status="error", error=_error_text(error), error_class=error_class)
            if failures.kills_context(error_class):  # this process's CUDA context is dead
                record["worker_restart"] = True
                return record
            torch._dynamo.reset()
            if self.partners:  # compiled ones may be reset: keep eager only
                self.partners = {k: v for k, v in self.partners.items() if k == "eager"}
            if self.device.type == "cuda":
                torch.cuda.empty_cache()
        finally:
            record["elapsed_s"] = time.perf_counter() - start
            record["lock_wait_s"] = self.lock.waited_s
            record["lock_held_s"] = self.lock.held_s
        return record

    def _release_partners(self) -> None:
        """End of an interleaved group: reset the backends whose steps were kept compiled."""
        if self.partners:
            for name in self.partners:
                backend_registry.lookup(name).reset()
            self.partners = {}

    def _relate(self, record: dict[str, Any]) -> None:
        """Speedup and memory ratio against eager of the same group, when eager was measured
        (interleaved: eager's median over the same rounds as this backend's)."""
        baseline = self.setup.baseline if self.setup is not None else {}
        eager_ms = record.get("interleaved_ms", {}).get("eager") or baseline.get("median_ms")
        if eager_ms and record.get("median_ms"):
            record["eager_median_ms"] = eager_ms
            record["speedup"] = eager_ms / record["median_ms"]
        if baseline.get("peak_memory_bytes") and record.get("peak_memory_bytes"):
            record["eager_peak_memory_bytes"] = baseline["peak_memory_bytes"]
            # PyTorch's "compression ratio": above 1 means the backend needs less memory.
            record["memory_ratio"] = baseline["peak_memory_bytes"] / record["peak_memory_bytes"]


def main() -> None:
    protocol: IO[str] = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # stray prints from libraries go to the log, not into the protocol
    options = json.loads(sys.argv[1])
    device = torch.device(options["device"])
    backend_registry.ensure_ember_importable()
    settings = Settings(**options["settings"])
    current: dict[str, str] = {}

    def report_wait(waited_s: float | None) -> None:
        """Tells the runner a wait started (None) or how long it took, so it is not charged."""
        if "id" in current:
            field = {"lock_waiting": True} if waited_s is None else {"lock_wait_s": waited_s}
            protocol.write(json.dumps({"id": current["id"], **field}) + "\n")

    lock = MeasurementLock(
        Path(options["lock_path"]),
        report_wait,
        pause_others=bool(options.get("pause_others")),
        # a paused worker's kernels already queued (e.g. a Triton autotuning run) still run
        drain_s=DRAIN_S if device.type == "cuda" else 0.0,
    )
    if lock.pause_others:
        lock.register()
    try:
        _warm_up(device, options["backends"])
    except Exception as error:  # the cases will report the same problem
        print(f"warm-up failed: {_error_text(error)}", file=sys.stderr)
    protocol.write(json.dumps({"ready": True}) + "\n")
    worker = Worker(device, settings, lock, interleave=bool(options.get("interleave")))
    for line in sys.stdin:
        task = json.loads(line)
        current["id"] = task["id"]
        print(f"[worker] {task['id']}", file=sys.stderr, flush=True)
        record = worker.run(task)
        protocol.write(json.dumps({"id": task["id"], "record": record}, default=str) + "\n")
        if record.get("worker_restart"):  # the runner starts a fresh worker for what is left
            print(f"[worker] exiting after {record.get('error_class')}", file=sys.stderr)
            protocol.flush()
            os._exit(3)


if __name__ == "__main__":
    main()
