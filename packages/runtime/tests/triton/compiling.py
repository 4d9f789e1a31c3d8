"""Runs checks of `compile_checks.py` in a process that compiles Triton instead of interpreting."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent / "compile_checks.py"


def run_compile_checks(root: Path, *checks: str) -> dict[str, str]:
    """{check: "ok" or its traceback}, from a fresh process with `TRITON_INTERPRET=0`."""
    environment = {**os.environ, "TRITON_INTERPRET": "0", "CUDA_VISIBLE_DEVICES": ""}
    result = subprocess.run(
        [sys.executable, str(SCRIPT), str(root), *checks],
        capture_output=True,
        text=True,
        env=environment,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    return dict(json.loads(result.stdout.strip().splitlines()[-1]))
