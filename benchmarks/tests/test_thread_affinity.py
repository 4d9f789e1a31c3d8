"""Pinning every thread (`benchmarks/thread_affinity.py`): a thread started before the pin,
as the autograd engine's device thread is, takes the new affinity, which
`os.sched_setaffinity(0, ...)` alone does not give it."""

from __future__ import annotations

import os
import threading

import pytest

from benchmarks.thread_affinity import pin_threads, thread_ids

pytestmark = pytest.mark.skipif(
    not hasattr(os, "sched_setaffinity") or not thread_ids(), reason="Linux affinity and /proc"
)


def test_a_running_thread_takes_the_pin() -> None:
    allowed = os.sched_getaffinity(0)
    target = {min(allowed)}
    started, release = threading.Event(), threading.Event()
    worker_id: list[int] = []

    def work() -> None:
        worker_id.append(threading.get_native_id())
        started.set()
        release.wait(10)

    worker = threading.Thread(target=work)
    worker.start()
    started.wait(10)
    try:
        os.sched_setaffinity(0, target)  # the calling thread only
        if len(allowed) > 1:
            assert os.sched_getaffinity(worker_id[0]) == allowed
        assert pin_threads(target) >= 2
        assert os.sched_getaffinity(worker_id[0]) == target
        assert os.sched_getaffinity(0) == target
    finally:
        pin_threads(allowed)
        release.set()
        worker.join()
    assert os.sched_getaffinity(0) == allowed
