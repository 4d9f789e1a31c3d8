"""kernel_compare's runner: worker processes, `--jobs` at a time, under one measurement lock.

A worker runs one model's modes (or, with `--split-modes`, one model and mode), eager first
(the error reference), then each compiler in turn; with `--split-backends`, one model, mode
and backend (a compiler's worker runs eager's first step alone for its reference), so that
torch.compile's autotuning of a model (minutes under max-autotune) does not hold back ember's. At the `--budget` the workers still running
are killed; every case a worker did not finish gets a record saying so (killed at the budget,
not started, lost with its worker), so the report is written from whatever finished. The lock
and the logs live in a scratch folder: the output folder keeps `environment.json`,
`results.jsonl`, `kernels.md` and `workers.log` (each worker's last `--log-lines` lines), and
the summary (benchmarks/kernel_compare_report.py) is printed at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.device_lock import end_pause_of


@dataclass
class Unit:
    """One worker process: a model and the modes it runs, and what became of it."""

    model: str
    modes: tuple[str, ...]
    backends: tuple[str, ...] = ()  # only these (`--split-backends`); () runs them all
    process: subprocess.Popen[bytes] | None = None
    log: Path | None = None
    started: float = 0.0
    ended: float = 0.0
    fate: str = "not started"  # "exit N", "killed at the budget"
    cases: list[tuple[str, str]] = field(default_factory=list)  # (mode, backend), in order

    @property
    def name(self) -> str:
        if len(self.modes) != 1:
            return self.model
        return "-".join((self.model, *self.modes, *(b.replace(".", "_") for b in self.backends)))


def plan(args: argparse.Namespace) -> list[Unit]:
    """The workers: one per model, or one per model and mode, or one per model, mode and
    backend (training first: it compiles longest, so with fewer jobs than workers it should not
    start last; with `--split-backends` the compilers before eager, torch.compile first)."""
    models = [m for m in args.models.split(",") if m]
    modes = tuple(m for m in args.modes.split(",") if m)
    noreuse = args.noreuse_modes.split(",")

    def backends_of(mode: str) -> list[str]:
        return args.backends.split(",") + (["ember-noreuse"] if mode in noreuse else [])

    ordered = sorted(modes, key=lambda mode: mode != "training")
    if args.split_backends:
        units = [
            Unit(model, (mode,), (backend,))
            for mode in ordered
            for backend in sorted(backends_of(mode), key=lambda b: (b == "eager", b != TC))
            for model in models
        ]
    elif args.split_modes:
        units = [Unit(model, (mode,)) for mode in ordered for model in models]
    else:
        units = [Unit(model, modes) for model in models]
    for unit in units:
        for mode in unit.modes:
            unit.cases += [(mode, b) for b in unit.backends or backends_of(mode)]
    return units


TC = "torch.compile"


def worker_command(args: argparse.Namespace, unit: Unit, out: Path, lock: Path) -> list[str]:
    return [
        sys.executable, "-m", "benchmarks.kernel_compare", "--worker", unit.model,
        "--out", str(out), "--lock", str(lock), "--modes", ",".join(unit.modes),
        "--backends", ",".join(unit.backends) or args.backends, "--dtype", args.dtype, "--steps", str(args.steps),
        "--warmup", str(args.warmup), "--profile-steps", str(args.profile_steps),
        "--noreuse-modes", "" if unit.backends else args.noreuse_modes, "--compile-mode", args.compile_mode,
    ]  # fmt: skip


def _worker_environment(args: argparse.Namespace) -> dict[str, str]:
    """The worker's environment: `--compile-threads` caps both compilers' compile pools (ten
    workers with a pool of one process per CPU each would hold ~160 Python processes)."""
    env = dict(os.environ)
    if args.compile_threads:
        env["TORCHINDUCTOR_COMPILE_THREADS"] = str(args.compile_threads)
        env["EMBER_COMPILE_THREADS"] = str(args.compile_threads)
    return env


def _last_lines(path: Path | None, count: int) -> list[str]:
    if path is None or not path.exists():
        return []
    text = path.read_bytes().decode("utf-8", "replace")
    return [line for line in text.splitlines() if line.strip()][-count:] if count else []


def _finished(results: Path) -> set[tuple[str, str, str]]:
    done: set[tuple[str, str, str]] = set()
    if results.exists():
        for line in results.read_text().splitlines():
            if line.strip():
                record = json.loads(line)
                done.add((record["model"], record["mode"], record["backend"]))
    return done


def unfinished_records(
    units: list[Unit], results: Path, args: argparse.Namespace
) -> list[dict[str, Any]]:
    """A record for each planned case with none in `results`: the case a killed worker was in
    (compiling, or waiting for the lock) and those after it, or those a dead worker left."""
    done = _finished(results)
    records = []
    for unit in units:
        last = (_last_lines(unit.log, 1) or [""])[0][:200]
        missing = [(mode, b) for mode, b in unit.cases if (unit.model, mode, b) not in done]
        for position, (mode, backend) in enumerate(missing):
            if unit.fate == "killed at the budget" and position == 0:
                status = "killed"
                error = (
                    f"killed at the budget ({args.budget:.0f} s) in this case, "
                    f"{unit.ended - unit.started:.0f} s after its worker started; "
                    f"the worker's last line: {last}"
                )
            elif unit.fate in ("killed at the budget", "not started"):
                status, error = "killed", "not started before the budget"
            else:
                status = "lost"
                error = f"its worker ended ({unit.fate}) before this case; last line: {last}"
            records.append(
                {"model": unit.model, "mode": mode, "dtype": args.dtype, "backend": backend,
                 "compile_mode": args.compile_mode, "status": status, "error": error}
            )  # fmt: skip
    return records


def _resume(units: list[Unit]) -> None:
    """SIGCONT to every running worker (one that died holding the lock left them paused)."""
    for unit in units:
        if unit.process is not None and unit.process.poll() is None:
            with contextlib.suppress(OSError):
                os.killpg(unit.process.pid, signal.SIGCONT)


def _launch(
    units: list[Unit],
    args: argparse.Namespace,
    out: Path,
    scratch: Path,
    command: Callable[[argparse.Namespace, Unit, Path, Path], list[str]],
) -> None:
    """Runs the units `--jobs` at a time until all end or the budget is spent."""
    lock = scratch / "measure.lock"
    pending = list(units)
    running: list[Unit] = []
    deadline = time.monotonic() + args.budget
    env = _worker_environment(args)
    while pending or running:
        while pending and len(running) < args.jobs and time.monotonic() < deadline:
            unit = pending.pop(0)
            unit.log = scratch / f"{unit.name}.log"
            with unit.log.open("wb") as log:
                unit.process = subprocess.Popen(
                    command(args, unit, out, lock), stdout=log, stderr=subprocess.STDOUT,
                    start_new_session=True, env=env,
                )  # fmt: skip
            unit.started = time.monotonic()
            running.append(unit)
            print(f"{unit.name}: started (pid {unit.process.pid})", flush=True)
        if pending and time.monotonic() >= deadline:
            pending.clear()  # never started: recorded as such
        time.sleep(0.5)
        for unit in list(running):
            assert unit.process is not None
            if unit.process.poll() is not None:
                running.remove(unit)
                unit.ended = time.monotonic()
                unit.fate = f"exit {unit.process.returncode}"
                elapsed = unit.ended - unit.started
                print(f"{unit.name}: {unit.fate} after {elapsed:.0f} s", flush=True)
                if end_pause_of(lock, unit.process.pid):
                    _resume(running)
        if time.monotonic() > deadline:
            for unit in running:
                assert unit.process is not None
                with contextlib.suppress(OSError):
                    os.killpg(unit.process.pid, signal.SIGKILL)
                unit.process.wait()
                unit.ended = time.monotonic()
                unit.fate = "killed at the budget"
                print(f"{unit.name}: killed at the budget ({args.budget:.0f} s)", flush=True)
            running.clear()


def _write_logs(units: list[Unit], out: Path, count: int) -> None:
    """workers.log: each worker's fate and its last `count` lines (one file, not ten)."""
    lines = []
    for unit in units:
        lines.append(f"==== {unit.name}: {unit.fate}")
        lines += _last_lines(unit.log, count)
    (out / "workers.log").write_text("\n".join(lines) + "\n")


def run_all(
    args: argparse.Namespace,
    command: Callable[[argparse.Namespace, Unit, Path, Path], list[str]] = worker_command,
) -> Path:
    """Runs every worker, records what they did not finish, writes the report and prints its
    summary. `command` builds a worker's command line (tests give a stand-in)."""
    from benchmarks.kernel_compare import environment
    from benchmarks.kernel_compare_report import load, report, summary

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    env = environment() | {"compile mode": args.compile_mode}
    (out / "environment.json").write_text(json.dumps(env))
    results = out / "results.jsonl"
    units = plan(args)
    scratch = Path(tempfile.mkdtemp(prefix="kernel-compare-"))
    try:
        _launch(units, args, out, scratch, command)
        missing = unfinished_records(units, results, args)
        if missing:
            with results.open("a") as stream:
                stream.writelines(json.dumps(record) + "\n" for record in missing)
        _write_logs(units, out, args.log_lines)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if results.exists():
        (out / "kernels.md").write_text(report([results], env))
        print("\n" + summary(load([results]), env), flush=True)
    return results
