"""The machine, the software versions and the date a run was made on, stamped on every output.

Collected in the parent process without initializing CUDA (the GPU name comes from
`nvidia-smi`), so the parent holds no GPU memory while workers measure.
"""

from __future__ import annotations

import datetime
import importlib.metadata
import os
import platform
import subprocess
from pathlib import Path
from typing import Any

PACKAGES = ("torch", "triton", "transformers", "timm", "torchvision", "numpy")
EMBER_PACKAGES = (
    "ember",
    "ember-prims",
    "ember-capture",
    "ember-autodiff",
    "ember-inductor",
    "ember-runtime",
)


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _gpu_names() -> list[str]:
    try:
        result = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [line.strip() for line in result.stdout.splitlines() if line.strip()]


def _git_commit(repository: Path) -> str | None:
    """The checkout's commit; `EMBER_BENCH_COMMIT` names it where the tree was copied
    without its history (the device machine gets a copy of the working tree)."""
    if os.environ.get("EMBER_BENCH_COMMIT"):
        return os.environ["EMBER_BENCH_COMMIT"]
    try:
        result = subprocess.run(
            ["git", "-C", str(repository), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return result.stdout.strip() or None


def collect(repository: Path, ember_source: str) -> dict[str, Any]:
    """Machine, versions and date, as one JSON-ready dict."""
    import torch

    versions: dict[str, str | None] = {"python": platform.python_version()}
    versions.update({package: _version(package) for package in PACKAGES})
    versions["torch"] = torch.__version__
    versions["torch_cuda"] = torch.version.cuda
    ember = {package: _version(package) for package in EMBER_PACKAGES}
    return {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": {
            "host": platform.node(),
            "platform": platform.platform(),
            "cpu": _cpu_name(),
            "cpu_cores": os.cpu_count(),
            "torch_threads": torch.get_num_threads(),
            "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
            "gpus": _gpu_names(),
        },
        "versions": versions,
        "ember": {"source": ember_source, "commit": _git_commit(repository), **ember},
    }


def describe(environment: dict[str, Any]) -> str:
    """One line: date, machine and versions (for dashboards and chart titles)."""
    machine, versions = environment["machine"], environment["versions"]
    device = "; ".join(machine["gpus"]) if machine["gpus"] else machine["cpu"]
    ember = environment["ember"]
    return (
        f"{environment['date']} · {device} · {machine['cpu_cores']} cores "
        f"({machine['torch_threads']} torch threads) · python {versions['python']} · "
        f"torch {versions['torch']} · triton {versions['triton']} · "
        f"transformers {versions['transformers']} · timm {versions['timm']} · "
        f"ember {ember['source']} @ {ember['commit']}"
    )
