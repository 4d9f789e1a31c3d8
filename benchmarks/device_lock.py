"""The measurement lock: one exclusive, cross-process file lock (fcntl) on the measured device.

Every worker takes it around the work that must not overlap another worker's (the float64
reference, warm-up, timed steps, peak memory), so that at most one process measures at a
time. The kernel drops an fcntl lock when its process dies, so a crashed or killed worker
never leaves it held. Each hold can move the process onto its reserved measurement cores.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from benchmarks.concurrency import pin_threads


class MeasurementLock:
    """An exclusive lock on `path`, shared by all the run's workers; counts waits and holds."""

    def __init__(
        self,
        path: Path,
        measure_cores: tuple[int, ...] = (),
        worker_cores: tuple[int, ...] = (),
        on_wait: Callable[[float | None], None] | None = None,
    ) -> None:
        self.path = path
        self.measure_cores = measure_cores
        self.worker_cores = worker_cores
        self.on_wait = on_wait  # called with None when a wait starts, then with its seconds
        self.waited_s = 0.0
        self.held_s = 0.0
        self._descriptor: int | None = None

    def reset_counters(self) -> None:
        self.waited_s = 0.0
        self.held_s = 0.0

    @contextlib.contextmanager
    def hold(self) -> Iterator[None]:
        """Blocks until no other process holds the lock, then holds it for the `with` body."""
        if self._descriptor is None:
            self._descriptor = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        asked = time.monotonic()
        try:
            fcntl.flock(self._descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
            waited = False
        except BlockingIOError:
            if self.on_wait is not None:
                self.on_wait(None)
            fcntl.flock(self._descriptor, fcntl.LOCK_EX)
            waited = True
        acquired = time.monotonic()
        self.waited_s += acquired - asked
        try:
            if waited and self.on_wait is not None:
                self.on_wait(acquired - asked)
            if self.measure_cores:
                pin_threads(self.measure_cores)
            yield
        finally:
            if self.worker_cores:
                pin_threads(self.worker_cores)
            fcntl.flock(self._descriptor, fcntl.LOCK_UN)
            self.held_s += time.monotonic() - acquired
