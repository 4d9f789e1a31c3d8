"""How `--jobs` concurrent workers share the machine's CPU cores.

With one job nothing is changed. With more, each worker gets `cores // (jobs + 1)` compile
threads (`TORCHINDUCTOR_COMPILE_THREADS`): with its own Python thread, the workers together
use about all the cores. ember's compile workers are not capped (`EMBER_COMPILE_THREADS`
unset: one per core, paused with their job while another job measures): capped at the same
count, ember's training compiles ran past the model budget on the H100 (two of five timed out
in run 20261123-144601), so its compile times here are taken with more workers than
torch.compile's. Measuring needs no reserved cores: a worker that measures pauses the
others (see `device_lock.py`), so it has the whole machine while it measures.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Concurrency:
    """The CPU plan of a run."""

    jobs: int
    cores: int
    compile_threads: int | None  # None: the compiler's default

    def worker_environment(self) -> dict[str, str]:
        """Environment variables every worker starts with."""
        if self.compile_threads is None:
            return {}
        return {"TORCHINDUCTOR_COMPILE_THREADS": str(self.compile_threads)}

    def describe(self) -> dict[str, Any]:
        return {"jobs": self.jobs, "cores": self.cores, "compile_threads": self.compile_threads}


def plan(jobs: int) -> Concurrency:
    """The CPU plan for `jobs` workers on the cores this process may use."""
    cores = len(os.sched_getaffinity(0))
    if jobs <= 1:
        return Concurrency(1, cores, None)
    return Concurrency(jobs, cores, max(1, cores // (jobs + 1)))
