"""How fast this machine's vCPUs run host-only ATen calls, one quiet process at a time.

`python -m benchmarks.host_speed [--processes 8] [--device cuda]`: starts processes one after
another, first unpinned, then each pinned to one CPU, and prints the median microseconds of an
`as_strided` view in each with the CPU it ran on. On the device machine (a 16-vCPU VM, one
NUMA node) session 20 found two speeds, 1.3-1.5 and 2.6-3.0 us, by vCPU and changing within
seconds: host-bound wall times are comparable only at the same speed, which is why the
CUDA-graph suite pins each measurement to the fastest vCPU (`cudagraph_suite`).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path


def _cpu_now() -> int:
    """The CPU this thread last ran on (Linux: field 39 of /proc/thread-self/stat)."""
    return int(Path("/proc/thread-self/stat").read_text().rsplit(")", 1)[1].split()[36])


def probe(device: str, pin: int | None) -> dict[str, object]:
    import torch

    if pin is not None:
        os.sched_setaffinity(0, {pin})
    base = torch.empty(1 << 18, device=device)
    samples = []
    for _ in range(30):
        start = time.perf_counter()
        for _ in range(200):
            torch.as_strided(base, (512, 512), (512, 1), 0)
        samples.append((time.perf_counter() - start) / 200 * 1e6)
    return {"pin": pin, "cpu": _cpu_now(), "as_strided_us": round(statistics.median(samples), 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=8, help="unpinned processes")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--pin", type=int, default=None, help=argparse.SUPPRESS)  # a child
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    if arguments.child:
        print(json.dumps(probe(arguments.device, arguments.pin)), flush=True)
        return
    print(f"{len(os.sched_getaffinity(0))} CPUs", flush=True)
    command = [sys.executable, "-m", "benchmarks.host_speed", "--child"]
    command += ["--device", arguments.device]
    for _ in range(arguments.processes):
        subprocess.run(command, check=True)
    for cpu in sorted(os.sched_getaffinity(0)):
        subprocess.run([*command, "--pin", str(cpu)], check=True)


if __name__ == "__main__":
    main()
