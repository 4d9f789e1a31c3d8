"""A worker that only speaks the runner's protocol, for scheduler tests: no torch, no models.

Each task carries a `script`: a list of `["work", s]` (sleep unlocked), `["measure", s]`
(sleep holding the real measurement lock), `["tick", s]` (note the time every 10 ms),
`["crash"]`, `["crash_holding"]` (die while holding the lock), `["sticky"]` (answer an error
that killed the CUDA context, then exit, as benchmarks/worker.py does) and `["hang"]`; the
record lists the measured intervals (monotonic s).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.device_lock import MeasurementLock


def main() -> None:
    protocol = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    options = json.loads(sys.argv[1])
    current: dict[str, str] = {}

    def report_wait(waited_s: float | None) -> None:
        field = {"lock_waiting": True} if waited_s is None else {"lock_wait_s": waited_s}
        protocol.write(json.dumps({"id": current["id"], **field}) + "\n")

    lock = MeasurementLock(
        Path(options["lock_path"]),
        on_wait=report_wait,
        pause_others=bool(options.get("pause_others")),
    )
    if lock.pause_others:
        lock.register()
    protocol.write(json.dumps({"ready": True, "pid": os.getpid()}) + "\n")
    for line in sys.stdin:
        task: dict[str, Any] = json.loads(line)
        current["id"] = task["id"]
        lock.reset_counters()
        intervals: list[list[float]] = []
        ticks: list[float] = []
        started = time.monotonic()
        for action, *arguments in task.get("script", []):
            if action == "work":
                time.sleep(arguments[0])
            elif action == "measure":
                with lock.hold():
                    begin = time.monotonic()
                    time.sleep(arguments[0])
                    intervals.append([begin, time.monotonic()])
            elif action == "tick":  # busy for a while, noting the time every 10 ms
                end = time.monotonic() + arguments[0]
                while time.monotonic() < end:
                    ticks.append(time.monotonic())
                    time.sleep(0.01)
            elif action == "crash":
                os._exit(3)
            elif action == "crash_holding":
                with lock.hold():
                    os._exit(4)
            elif action == "hang":
                time.sleep(3600)
        sticky = ["sticky"] in task.get("script", [])
        record = {
            "status": "error" if sticky else task.get("status", "pass"),
            "intervals": intervals,
            "ticks": ticks,
            "span": [started, time.monotonic()],
            "pid": os.getpid(),
            "lock_wait_s": lock.waited_s,
        }
        if sticky:
            record.update(error_class="illegal_memory_access", worker_restart=True)
        protocol.write(json.dumps({"id": task["id"], "record": record}) + "\n")
        if sticky:
            protocol.flush()
            os._exit(3)


if __name__ == "__main__":
    main()
