"""The compile report: one static HTML page per run of what ember compiled and how.

`compile_report(directory)` records while its block runs and writes
`<directory>/ember-report-<pid>.html` at its end (the returned `CompileReport` has the
`path`); `EMBER_REPORT=<directory>` records the whole process and writes the page when it
exits. Capture records each new cache entry (`record_capture`); the later layers are heard
through their log topics (`recorder.py`); `html.py` renders the sections.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import threading
import time
import types
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from ember.capture import logs
from ember.capture.report.html import SECTIONS, render
from ember.capture.report.recorder import Recorder
from ember.prims import write_atomically

if TYPE_CHECKING:
    from ember.capture.cache import CacheEntry

__all__ = [
    "SECTIONS",
    "CompileReport",
    "compile_report",
    "record_capture",
    "start_from_environment",
]

_active: list[Recorder] = []
_lock = threading.Lock()


class CompileReport:
    """A report being recorded: `write()` renders it to `path`."""

    def __init__(self, directory: str | os.PathLike[str], title: str = "") -> None:
        self.directory = Path(directory)
        self.title = title
        self.path = self.directory / f"ember-report-{os.getpid()}.html"
        self.recorder = Recorder()

    def start(self) -> None:
        logs.configure_once()  # EMBER_LOGS first: applying it later would silence the topics
        self.recorder.start()
        with _lock:
            _active.append(self.recorder)

    def stop(self) -> None:
        with _lock:
            if self.recorder in _active:
                _active.remove(self.recorder)
        self.recorder.stop()

    def write(self) -> Path:
        self.directory.mkdir(parents=True, exist_ok=True)
        write_atomically(self.path, render(self.recorder, self.title).encode())
        return self.path


@contextlib.contextmanager
def compile_report(directory: str | os.PathLike[str], title: str = "") -> Iterator[CompileReport]:
    """Record what ember compiles inside the block; write the HTML page when it ends.
    `title` heads the page (default: the program's command line)."""
    report = CompileReport(directory, title)
    report.start()
    try:
        yield report
    finally:
        report.stop()
        report.write()


def record_capture(
    fn: types.FunctionType,
    entry: CacheEntry,
    recompile_reason: str | None,
    started: float,
) -> None:
    """Capture's hook: a new cache entry of `fn` (captured since `started`, perf_counter)."""
    if not _active:
        return
    from ember.capture.translate import guard_line

    seconds = time.perf_counter() - started
    guards = [guard_line(guard) for guard in entry.check.guards]
    for recorder in list(_active):
        recorder.record_capture(fn, entry, recompile_reason, seconds, guards)


_from_environment: list[CompileReport] = []


def start_from_environment(directory: str) -> None:
    """`EMBER_REPORT`: record the whole process into `directory`, written at exit."""
    if _from_environment or not directory:
        return
    report = CompileReport(directory)
    report.start()
    _from_environment.append(report)

    def finish() -> None:
        report.stop()
        report.write()

    atexit.register(finish)
