"""Runs tasks in `jobs` worker processes under time limits, restarting a worker after a crash.

A unit of work is one model (all its modes, dtypes and backends, in plan order), so that a
worker reuses the model's float64 reference; each free worker takes the next unit. Limits:
each case has its own timeout; each model and dtype gets a model budget; the whole run gets a
total budget. Time a case spends waiting for the measurement lock is not charged to the case
or model (the worker reports it), only to the run. A case that would start with too little
time left is recorded as skipped, and so is every other backend of a group whose eager
baseline did not run; a case cut off by a limit is a timeout; the run always goes on.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import signal
import subprocess
import sys
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from benchmarks.device_lock import end_pause_of, paused_between

STARTUP_LIMIT_S = 240.0
MINIMUM_CASE_S = 10.0  # do not start a case with less time than this left


@dataclass(frozen=True)
class Limits:
    """Seconds allowed per case, per model (all its cases), and for the whole run."""

    case_s: float
    model_s: float
    total_s: float


class WorkerProcess:
    """One worker subprocess and its protocol pipe, read line by line without blocking."""

    def __init__(
        self,
        options: dict[str, Any],
        log: IO[str],
        environment: dict[str, str] | None = None,
        module: str = "benchmarks.worker",
    ) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", module, json.dumps(options)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            bufsize=1,
            start_new_session=True,  # its compile workers die with it
            cwd=Path(__file__).resolve().parent.parent,
            env={**os.environ, **(environment or {})},
        )
        assert self.process.stdout is not None
        self.descriptor = self.process.stdout.fileno()
        os.set_blocking(self.descriptor, False)
        self.buffer = b""
        self.closed = False

    def messages(self) -> list[dict[str, Any]]:
        """The complete protocol messages that arrived so far (sets `closed` at end of file)."""
        while True:
            try:
                chunk = os.read(self.descriptor, 65536)
            except BlockingIOError:
                break
            if not chunk:
                self.closed = True
                break
            self.buffer += chunk
        *lines, self.buffer = self.buffer.split(b"\n")
        parsed = []
        for line in lines:
            with contextlib.suppress(json.JSONDecodeError):
                message = json.loads(line)
                if isinstance(message, dict):
                    parsed.append(message)
        return parsed

    def read(self, timeout_s: float) -> dict[str, Any] | None:
        """The next protocol message, or None on timeout or if the worker died (one worker)."""
        selector = selectors.DefaultSelector()
        selector.register(self.descriptor, selectors.EVENT_READ)
        deadline = time.monotonic() + timeout_s
        pending: list[dict[str, Any]] = []
        try:
            while (remaining := deadline - time.monotonic()) > 0:
                pending += self.messages()
                if pending:
                    return pending[0]
                if self.closed:
                    return None
                selector.select(timeout=min(remaining, 1.0))
        finally:
            selector.close()
        return None

    def send(self, task: dict[str, Any]) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(task) + "\n")
        self.process.stdin.flush()

    def stop(self) -> None:
        """Kills the worker's whole process group (it leads its own session)."""
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()

    def exit_description(self) -> str:
        code = self.process.poll()
        if code is None:
            return "worker still running"
        if code < 0:
            return f"worker killed by signal {signal.Signals(-code).name}"
        return f"worker exited with code {code}"


@dataclass
class _Slot:
    """One of the `jobs` places a worker runs in, with its unit and its case in flight."""

    worker: WorkerProcess | None = None
    queue: deque[dict[str, Any]] = field(default_factory=deque)
    task: dict[str, Any] | None = None  # the case sent (or waiting for the worker to start)
    starting: bool = False
    sent_at: float = 0.0
    deadline: float = 0.0
    waited_s: float = 0.0  # lock waits reported for the case in flight
    waiting: bool = False  # its worker is waiting for the measurement lock now


def units(tasks: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Consecutive tasks of one model, in plan order: what one worker runs back to back."""
    grouped: list[list[dict[str, Any]]] = []
    for task in tasks:
        if grouped and grouped[-1][0]["model"] == task["model"]:
            grouped[-1].append(task)
        else:
            grouped.append([task])
    return grouped


def run_tasks(
    tasks: list[dict[str, Any]],
    options: dict[str, Any],
    limits: Limits,
    log: IO[str],
    emit: Callable[[dict[str, Any], dict[str, Any]], None],
    jobs: int = 1,
    environment: dict[str, str] | None = None,
    worker_module: str = "benchmarks.worker",
) -> None:
    """Runs every task, calling `emit(task, record)` once for each, whatever happens.

    `worker_module` is what `python -m` starts as a worker (tests give one that only
    speaks the protocol)."""
    started = time.monotonic()
    run_deadline = started + limits.total_s
    lock_path = options.get("lock_path") if options.get("pause_others") else None
    pending = deque(units(tasks))
    slots = [_Slot() for _ in range(max(1, jobs))]
    spent_by_model: dict[str, float] = {}
    baseline_failed: dict[tuple[str, str, str], str] = {}

    def stop(slot: _Slot) -> str:
        assert slot.worker is not None
        description = slot.worker.exit_description()
        slot.worker.stop()
        held_pause = False
        if lock_path is not None:  # no longer one to pause, nor pausing the others
            with contextlib.suppress(OSError):
                Path(f"{lock_path}.workers", str(slot.worker.process.pid)).unlink()
            held_pause = end_pause_of(Path(lock_path), slot.worker.process.pid)
        slot.worker = None
        for other in slots if held_pause else []:  # it died holding the lock, others paused
            if other.worker is not None:
                with contextlib.suppress(OSError):
                    os.killpg(other.worker.process.pid, signal.SIGCONT)
        return description

    def finish(slot: _Slot, record: dict[str, Any]) -> None:
        task = slot.task
        assert task is not None
        slot.task = None
        if not slot.starting:
            now = time.monotonic()
            elapsed = now - slot.sent_at - slot.waited_s
            if lock_path is not None and slot.worker is not None:
                elapsed -= paused_between(
                    Path(lock_path), slot.sent_at, now, slot.worker.process.pid
                )
            key = f"{task['model']}/{task['dtype']}"
            spent_by_model[key] = spent_by_model.get(key, 0.0) + max(elapsed, 0.0)
        slot.starting = False
        if task["backend"] == "eager" and record.get("status") not in ("pass", "fail_accuracy"):
            reason = (record.get("error") or "").splitlines()[:1]
            baseline_failed[_group(task)] = f"eager baseline {record.get('status')}" + (
                f": {reason[0][:160]}" if reason else ""
            )
        emit(task, record)

    def advance(slot: _Slot) -> None:
        """Starts the slot's next case (or its worker), skipping what cannot run."""
        while slot.task is None:
            if not slot.queue:
                if not pending:
                    if slot.worker is not None:  # nothing left for it: free its memory
                        stop(slot)
                    return
                slot.queue.extend(pending.popleft())
            task = slot.queue.popleft()
            now = time.monotonic()
            total_left = run_deadline - now
            model_left = limits.model_s - spent_by_model.get(
                f"{task['model']}/{task['dtype']}", 0.0
            )
            allowed = min(limits.case_s, total_left, model_left)
            if _group(task) in baseline_failed and task["backend"] != "eager":
                emit(task, {"status": "skipped", "error": baseline_failed[_group(task)]})
                continue
            if allowed < MINIMUM_CASE_S:
                which = "run" if total_left <= model_left else "model"
                emit(task, {"status": "skipped", "error": f"{which} time budget spent"})
                continue
            slot.task, slot.waited_s, slot.waiting = task, 0.0, False
            if slot.worker is None:
                slot.worker = WorkerProcess(options, log, environment, worker_module)
                slot.starting = True
                slot.deadline = now + min(STARTUP_LIMIT_S, total_left)
            else:
                send(slot, allowed)

    def send(slot: _Slot, allowed: float) -> None:
        assert slot.worker is not None and slot.task is not None
        slot.starting = False
        slot.sent_at = time.monotonic()
        slot.deadline = slot.sent_at + allowed
        slot.worker.send(slot.task)

    def handle(slot: _Slot, message: dict[str, Any]) -> None:
        task = slot.task
        if task is None:
            return
        if slot.starting and message.get("ready"):
            now = time.monotonic()
            model_key = f"{task['model']}/{task['dtype']}"
            allowed = min(
                limits.case_s, run_deadline - now, limits.model_s - spent_by_model.get(model_key, 0)
            )
            if allowed < MINIMUM_CASE_S:
                finish(slot, {"status": "skipped", "error": "run time budget spent"})
                advance(slot)
            else:
                send(slot, allowed)
        elif message.get("id") == task["id"] and message.get("lock_waiting"):
            slot.waiting = True
        elif message.get("id") == task["id"] and "lock_wait_s" in message:
            waited = float(message["lock_wait_s"])
            slot.waiting = False
            slot.waited_s += waited
            slot.deadline = min(slot.deadline + waited, run_deadline)
        elif message.get("id") == task["id"] and "record" in message:
            finish(slot, message["record"])
            if message["record"].get("worker_restart") and slot.worker is not None:
                stop(slot)  # it exits (its CUDA context is dead): the next case gets a new one
            advance(slot)

    def lost(slot: _Slot) -> None:
        """The worker died or ran past the deadline: record why and go on without it."""
        assert slot.worker is not None and slot.task is not None
        if slot.worker.closed:  # its pipe closed: let it exit, so its status can be told
            with contextlib.suppress(subprocess.TimeoutExpired):
                slot.worker.process.wait(timeout=5.0)
        alive = slot.worker.process.poll() is None and not slot.worker.closed
        description = stop(slot)
        if slot.starting:
            if alive and run_deadline - time.monotonic() < MINIMUM_CASE_S:
                record = {"status": "skipped", "error": "run time budget spent"}
            else:
                record = {"status": "error", "error": f"worker did not start: {description}"}
        elif alive and time.monotonic() >= run_deadline - 1.0:
            # cut off by the end of the run, not by its own limit: not a result about the model
            record = {"status": "skipped", "error": "run time budget ran out during this case"}
        elif alive:
            allowed = slot.deadline - slot.sent_at - slot.waited_s
            record = {
                "status": "timeout",
                "error": f"no result within {allowed:.0f} s",
                "error_class": "timeout",
                "allowed_s": round(allowed, 1),  # below the case limit: the model budget's cut
            }
        else:  # killed by a signal (a segfault in a kernel) or exited: a crash
            record = {
                "status": "error",
                "error": f"{description} during this case",
                "error_class": "worker_crash",
            }
        finish(slot, record)
        advance(slot)

    selector = selectors.DefaultSelector()
    try:
        for slot in slots:
            advance(slot)
        while any(slot.task is not None for slot in slots):
            active = [s for s in slots if s.task is not None and s.worker is not None]
            descriptors = {s.worker.descriptor: s for s in active if s.worker is not None}
            for descriptor in descriptors:
                selector.register(descriptor, selectors.EVENT_READ)
            timeout = max(
                0.0, min(_deadline(s, run_deadline, lock_path) for s in active) - time.monotonic()
            )
            selector.select(timeout=min(timeout, 1.0))
            for descriptor in descriptors:
                selector.unregister(descriptor)
            for slot in active:
                if slot.worker is None:
                    continue
                for message in slot.worker.messages():
                    handle(slot, message)
                if slot.worker is not None and slot.task is not None:
                    if slot.worker.closed or time.monotonic() > _deadline(
                        slot, run_deadline, lock_path
                    ):
                        lost(slot)
    finally:
        selector.close()
        for slot in slots:
            if slot.worker is not None:
                slot.worker.stop()


def _group(task: dict[str, Any]) -> tuple[str, str, str]:
    return (task["model"], task["mode"], task["dtype"])


def _deadline(slot: _Slot, run_deadline: float, lock_path: str | None) -> float:
    """The case's deadline, moved on by the time other workers' measurements paused it; while
    a worker waits for the lock only the run's deadline applies."""
    if slot.waiting:
        return run_deadline
    if lock_path is None or slot.starting or slot.worker is None:
        return slot.deadline
    paused = paused_between(
        Path(lock_path), slot.sent_at, time.monotonic(), slot.worker.process.pid
    )
    return min(slot.deadline + paused, run_deadline)
