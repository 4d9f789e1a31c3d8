"""The measurement lock across real processes: holds never overlap; a killed holder frees it."""

from __future__ import annotations

import fcntl
import itertools
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.device_lock import MeasurementLock, paused_between

REPOSITORY = Path(__file__).resolve().parents[2]

HOLDER = """
import json, sys, time
from pathlib import Path
from benchmarks.device_lock import MeasurementLock
path, start_at, rounds = Path(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
lock = MeasurementLock(path)
while time.monotonic() < start_at:  # both processes ask at the same instant
    time.sleep(0.001)
intervals = []
for _ in range(rounds):
    with lock.hold():
        begin = time.monotonic()
        time.sleep(0.03)
        intervals.append([begin, time.monotonic()])
print(json.dumps({"intervals": intervals, "waited": lock.waited_s}))
"""


def _python(code: str, *arguments: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", code, *arguments],
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPOSITORY,
    )


def test_two_processes_never_hold_at_once(tmp_path: Path) -> None:
    start_at = time.monotonic() + 3.0  # CLOCK_MONOTONIC is one clock for every process
    processes = [_python(HOLDER, str(tmp_path / "lock"), str(start_at), "5") for _ in range(2)]
    results = [json.loads(p.communicate(timeout=60)[0]) for p in processes]
    intervals = sorted(i for r in results for i in r["intervals"])
    assert len(intervals) == 10
    for (_, end), (begin, _) in itertools.pairwise(intervals):
        assert begin >= end, f"two holds overlap: one ends at {end}, the next began at {begin}"
    # both asked at once, so one of them must have waited for the other
    assert max(r["waited"] for r in results) > 0.02


def test_lock_of_a_killed_holder_is_released(tmp_path: Path) -> None:
    path = tmp_path / "lock"
    holder = _python(
        "import sys, time\n"
        "from pathlib import Path\n"
        "from benchmarks.device_lock import MeasurementLock\n"
        "with MeasurementLock(Path(sys.argv[1])).hold():\n"
        "    print('held', flush=True)\n"
        "    time.sleep(600)\n",
        str(path),
    )
    assert holder.stdout is not None
    assert holder.stdout.readline().strip() == "held"
    descriptor = os.open(path, os.O_RDWR)
    try:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
            raise AssertionError("the lock was free while another process held it")
        except BlockingIOError:
            pass
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait(timeout=30)
    finally:
        os.close(descriptor)
    lock = MeasurementLock(path)
    started = time.monotonic()
    with lock.hold():
        pass
    assert time.monotonic() - started < 5.0


def test_waits_are_reported_and_counted(tmp_path: Path) -> None:
    path = tmp_path / "lock"
    events: list[float | None] = []
    waiter = MeasurementLock(path, on_wait=events.append)
    with waiter.hold():  # free: no wait is reported
        pass
    assert events == []
    holder = _python(
        "import sys, time\n"
        "from pathlib import Path\n"
        "from benchmarks.device_lock import MeasurementLock\n"
        "with MeasurementLock(Path(sys.argv[1])).hold():\n"
        "    print('held', flush=True)\n"
        "    time.sleep(0.5)\n",
        str(path),
    )
    assert holder.stdout is not None
    assert holder.stdout.readline().strip() == "held"
    with waiter.hold():
        pass
    holder.wait(timeout=30)
    assert events[0] is None and isinstance(events[1], float) and events[1] > 0.1
    assert waiter.waited_s >= events[1]


TICKER = """
import sys, time
from pathlib import Path
from benchmarks.device_lock import MeasurementLock
MeasurementLock(Path(sys.argv[1]), pause_others=True).register()
print("registered", flush=True)
end = time.monotonic() + 2.5
while time.monotonic() < end:
    print(time.monotonic(), flush=True)
    time.sleep(0.005)
"""

PAUSER = """
import json, sys, time
from pathlib import Path
from benchmarks.device_lock import MeasurementLock
lock = MeasurementLock(Path(sys.argv[1]), pause_others=True)
lock.register()
time.sleep(0.5)
with lock.hold():
    begin = time.monotonic()
    time.sleep(0.6)
    end = time.monotonic()
print(json.dumps({"hold": [begin, end], "paused": lock.paused_between(begin - 1, end + 1)}))
"""


def test_a_hold_pauses_the_other_workers(tmp_path: Path) -> None:
    path = tmp_path / "lock"
    ticker = subprocess.Popen(
        [sys.executable, "-c", TICKER, str(path)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPOSITORY,
        start_new_session=True,  # a worker leads its own process group
    )
    assert ticker.stdout is not None
    assert ticker.stdout.readline().strip() == "registered"
    pauser = _python(PAUSER, str(path))
    result = json.loads(pauser.communicate(timeout=60)[0])
    ticks = [float(line) for line in ticker.communicate(timeout=60)[0].split()]
    begin, end = result["hold"]
    inside = [t for t in ticks if begin + 0.05 < t < end - 0.05]
    assert inside == [], "the other worker kept running while the lock was held"
    assert any(t < begin for t in ticks) and any(t > end for t in ticks)  # it ran, then resumed
    # the pause was logged, for the others' compile times and case limits to leave out; the
    # holder itself was not paused
    assert 0.5 < paused_between(path, begin - 1, end + 1, os.getpid()) < 1.5
    assert result["paused"] == 0.0


LATE = """
import sys, time
from pathlib import Path
from benchmarks.device_lock import MeasurementLock
lock = MeasurementLock(Path(sys.argv[1]), pause_others=True)
lock.register()
print(time.monotonic(), flush=True)
"""


def test_a_worker_registering_during_a_hold_waits_for_it_to_end(tmp_path: Path) -> None:
    """A hold pauses only the workers registered when it began: one started during it (the
    runner starts workers as others end) must not run beside the measurement."""
    path = tmp_path / "lock"
    holder = MeasurementLock(path, pause_others=True)
    with holder.hold():
        late = _python(LATE, str(path))
        time.sleep(1.0)
        released = time.monotonic()
    started = float(late.communicate(timeout=60)[0])
    assert started >= released
