"""How `--jobs` concurrent workers share the machine's CPU cores.

With one job nothing is changed. With more, each worker gets `cores // (jobs + 1)` compile
threads (`TORCHINDUCTOR_COMPILE_THREADS`), and when there are enough cores one such share is
reserved for measuring: workers run on the other cores and move onto the reserved ones only
while they hold the measurement lock, so another worker's compile never takes a measuring core.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Concurrency:
    """The CPU plan of a run; `measure_cores` empty means no pinning."""

    jobs: int
    cores: int
    compile_threads: int | None
    measure_cores: tuple[int, ...]
    worker_cores: tuple[int, ...]

    def worker_environment(self) -> dict[str, str]:
        """Environment variables every worker starts with."""
        if self.compile_threads is None:
            return {}
        return {"TORCHINDUCTOR_COMPILE_THREADS": str(self.compile_threads)}

    def describe(self) -> dict[str, Any]:
        return {
            "jobs": self.jobs,
            "cores": self.cores,
            "compile_threads": self.compile_threads,
            "measure_cores": list(self.measure_cores),
            "worker_cores": list(self.worker_cores),
        }


def plan(jobs: int, threads: int | None = None) -> Concurrency:
    """The CPU plan for `jobs` workers on the cores this process may use."""
    available = sorted(os.sched_getaffinity(0))
    cores = len(available)
    if jobs <= 1:
        return Concurrency(1, cores, None, (), ())
    share = max(1, cores // (jobs + 1))
    measure = max(share, threads or 1)
    if cores - measure < jobs:  # too few cores to keep one for measuring: share them all
        return Concurrency(jobs, cores, share, (), ())
    return Concurrency(jobs, cores, share, tuple(available[-measure:]), tuple(available[:-measure]))


def pin_threads(cores: tuple[int, ...]) -> None:
    """Moves every thread of this process onto `cores` (Linux: affinity is per thread)."""
    try:
        threads = [int(name) for name in os.listdir("/proc/self/task")]
    except OSError:
        threads = [0]
    for thread in threads:
        with contextlib.suppress(OSError):  # a thread that ended meanwhile
            os.sched_setaffinity(thread, cores)
