"""The measurement lock: one exclusive, cross-process file lock (fcntl) on the measured device.

Every worker takes it around the work that must not overlap another worker's (the float64
reference, warm-up, timed steps, peak memory), so that at most one process measures at a
time. While it holds the lock, a worker pauses the other registered workers (SIGSTOP to their
process groups, SIGCONT after), so that their compiles submit no device work (first steps,
Triton autotuning) and take no CPU; the pauses are logged so compile times can leave them
out. The kernel drops an fcntl lock when its process dies, so a killed worker never leaves it
held (the runner resumes the others).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path


class MeasurementLock:
    """An exclusive lock on `path`, shared by all the run's workers; counts waits and holds."""

    def __init__(
        self,
        path: Path,
        on_wait: Callable[[float | None], None] | None = None,
        pause_others: bool = False,
        drain_s: float = 0.0,
    ) -> None:
        self.path = path
        self.pause_others = pause_others
        self.drain_s = drain_s
        self.registry = Path(f"{path}.workers")  # one file per worker process, named by pid
        self.pauses = Path(f"{path}.pauses")  # "holder start end" (monotonic s) per pause
        self.on_wait = on_wait  # called with None when a wait starts, then with its seconds
        self.waited_s = 0.0
        self.held_s = 0.0
        self._descriptor: int | None = None

    def register(self) -> None:
        """Lets other workers' holds pause this process (and its process group)."""
        self.registry.mkdir(parents=True, exist_ok=True)
        (self.registry / str(os.getpid())).touch()
        # a hold that began before this process registered did not pause it: wait for that
        # hold to end before doing any work (session 20: workers started mid-measurement
        # compiled beside it, and host-bound wall times varied by up to 60% between runs)
        descriptor = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_SH)
        finally:
            os.close(descriptor)  # closing drops the shared lock

    def _signal_others(self, which: signal.Signals) -> int:
        """Sends `which` to every other registered worker's process group; how many got it."""
        try:
            names = os.listdir(self.registry)
        except OSError:
            return 0
        signalled = 0
        for name in names:
            if name.isdigit() and int(name) != os.getpid() and _sibling(int(name)):
                with contextlib.suppress(OSError):  # it ended: nothing to pause
                    os.killpg(int(name), which)
                    signalled += 1
        return signalled

    def paused_between(self, start: float, end: float) -> float:
        """Seconds between `start` and `end` (monotonic) during which other holds paused us."""
        return paused_between(self.path, start, end, os.getpid())

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
        paused_at: float | None = None
        try:
            if waited and self.on_wait is not None:
                self.on_wait(acquired - asked)
            if self.pause_others:
                paused_at = time.monotonic()
                Path(f"{self.path}.pausing").write_text(f"{os.getpid()} {paused_at}")
                if self._signal_others(signal.SIGSTOP) and self.drain_s:
                    time.sleep(self.drain_s)  # device work they queued before the pause ends
            yield
        finally:
            if paused_at is not None:
                self._signal_others(signal.SIGCONT)
                with self.pauses.open("a") as log:
                    log.write(f"{os.getpid()} {paused_at} {time.monotonic()}\n")
                with contextlib.suppress(OSError):
                    Path(f"{self.path}.pausing").unlink()
            fcntl.flock(self._descriptor, fcntl.LOCK_UN)
            self.held_s += time.monotonic() - acquired


def _sibling(pid: int) -> bool:
    """Whether `pid` is another worker of the same runner (a stale pid may have been reused)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    parent = int(stat.rsplit(")", 1)[1].split()[1])  # the field after the state
    return parent == os.getppid()


def paused_between(path: Path, start: float, end: float, process: int) -> float:
    """Seconds of [start, end] during which holds of `path` by others than `process` paused
    the registered workers (the pause going on now included)."""
    pauses: list[tuple[int, float, float]] = []
    with contextlib.suppress(OSError):
        for line in Path(f"{path}.pauses").read_text().splitlines():
            with contextlib.suppress(ValueError):
                holder, begin, finish = line.split()
                pauses.append((int(holder), float(begin), float(finish)))
    with contextlib.suppress(OSError, ValueError):
        holder, begin = Path(f"{path}.pausing").read_text().split()
        pauses.append((int(holder), float(begin), time.monotonic()))
    return sum(
        max(0.0, min(end, finish) - max(start, begin))
        for holder, begin, finish in pauses
        if holder != process
    )


def end_pause_of(path: Path, process: int) -> bool:
    """Closes the pause of `process` if it was killed while holding `path`; True if it was
    (the runner then resumes the paused workers)."""
    try:
        holder, begin = Path(f"{path}.pausing").read_text().split()
        if int(holder) != process:
            return False
        with Path(f"{path}.pauses").open("a") as log:
            log.write(f"{holder} {begin} {time.monotonic()}\n")
        Path(f"{path}.pausing").unlink()
    except (OSError, ValueError):
        return False
    return True
