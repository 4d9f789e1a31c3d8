"""CPU affinity for every thread of this process.

`os.sched_setaffinity(0, cpus)` sets the calling thread's affinity only (Linux: the pid 0
means the calling thread). A training step's backward runs on another thread: the autograd
engine runs the backward of CUDA tensors on its device thread (one per GPU, started at the
first backward), while the calling thread waits. So the suite's pinning (session 20) kept
the forward on the fastest vCPU and left the backward, most of a training step's host work,
to whichever vCPU the scheduler chose (session 21). Threads started later inherit the
affinity of the thread that starts them.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

TASKS = Path("/proc/self/task")


def thread_ids() -> list[int]:
    """The native ids of this process's threads (Linux), or [] where /proc does not list them."""
    try:
        return sorted(int(name) for name in os.listdir(TASKS) if name.isdigit())
    except OSError:
        return []


def pin_threads(cpus: set[int]) -> int:
    """Sets the affinity of every thread of this process to `cpus`; how many threads took it
    (a thread that ended meanwhile is skipped). The calling thread always takes it."""
    pinned = 0
    for tid in thread_ids():
        with contextlib.suppress(OSError):  # ended since the listing
            os.sched_setaffinity(tid, cpus)
            pinned += 1
    if not pinned:
        os.sched_setaffinity(0, cpus)
        pinned = 1
    return pinned
