"""Runs tasks in a worker process under time limits, restarting the worker after a crash or kill.

Limits: each case has its own timeout; each model's cases together get a model budget; the
whole run gets a total budget. A case that would start with too little time left is recorded
as skipped; a case cut off by a limit is recorded as a timeout; the run always goes on.
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
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

STARTUP_LIMIT_S = 240.0
MINIMUM_CASE_S = 10.0  # do not start a case with less time than this left


@dataclass(frozen=True)
class Limits:
    """Seconds allowed per case, per model (all its cases), and for the whole run."""

    case_s: float
    model_s: float
    total_s: float


class WorkerProcess:
    """One worker subprocess and its protocol pipe."""

    def __init__(self, options: dict[str, Any], log: IO[str]) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.worker", json.dumps(options)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            bufsize=1,
            start_new_session=True,  # its compile workers die with it
            cwd=Path(__file__).resolve().parent.parent,
        )
        assert self.process.stdout is not None
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.process.stdout, selectors.EVENT_READ)

    def read(self, timeout_s: float) -> dict[str, Any] | None:
        """The next protocol message, or None on timeout or if the worker died."""
        assert self.process.stdout is not None
        deadline = time.monotonic() + timeout_s
        while (remaining := deadline - time.monotonic()) > 0:
            if not self.selector.select(timeout=min(remaining, 5.0)):
                if self.process.poll() is not None:
                    return None
                continue
            line = self.process.stdout.readline()
            if not line:
                return None
            try:
                return json.loads(line)
            except json.JSONDecodeError:
                continue
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


def run_tasks(
    tasks: list[dict[str, Any]],
    options: dict[str, Any],
    limits: Limits,
    log: IO[str],
    emit: Callable[[dict[str, Any], dict[str, Any]], None],
) -> None:
    """Runs every task, calling `emit(task, record)` once for each, whatever happens."""
    started = time.monotonic()
    spent_by_model: dict[str, float] = {}
    worker: WorkerProcess | None = None
    try:
        for task in tasks:
            model_key = f"{task['model']}/{task['dtype']}"
            total_left = limits.total_s - (time.monotonic() - started)
            model_left = limits.model_s - spent_by_model.get(model_key, 0.0)
            allowed = min(limits.case_s, total_left, model_left)
            if allowed < MINIMUM_CASE_S:
                which = "run" if total_left <= model_left else "model"
                emit(task, {"status": "skipped", "error": f"{which} time budget spent"})
                continue
            if worker is None:
                worker = WorkerProcess(options, log)
                ready = worker.read(min(STARTUP_LIMIT_S, total_left))
                if ready is None or not ready.get("ready"):
                    alive = worker.process.poll() is None
                    description = worker.exit_description()
                    worker.stop()
                    worker = None
                    if alive and total_left < STARTUP_LIMIT_S:
                        emit(task, {"status": "skipped", "error": "run time budget spent"})
                    else:
                        emit(
                            task,
                            {"status": "error", "error": f"worker did not start: {description}"},
                        )
                    continue
            case_start = time.monotonic()
            worker.send(task)
            answer = worker.read(allowed)
            spent_by_model[model_key] = (
                spent_by_model.get(model_key, 0.0) + time.monotonic() - case_start
            )
            if answer is not None and answer.get("id") == task["id"]:
                emit(task, answer["record"])
                continue
            alive = worker.process.poll() is None
            description = worker.exit_description()
            worker.stop()
            worker = None
            if alive:
                emit(task, {"status": "timeout", "error": f"no result within {allowed:.0f} s"})
            else:
                emit(task, {"status": "error", "error": f"{description} during this case"})
    finally:
        if worker is not None:
            worker.stop()
