"""Result records and the JSON lines file that holds them.

The first line of a results file is the run's header (`"record": "run"`: settings,
machine, versions, date); every later line is one case (`"record": "case"`), tagged with
the run id, so a file that was cut short is still complete up to its last line.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

STATUSES = ("pass", "fail_accuracy", "error", "timeout", "not_available", "skipped")


def _clean(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)  # JSON has no NaN or infinity
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    return value


def append(path: Path, record: dict[str, Any]) -> None:
    """Appends one record and flushes it, so partial runs keep everything written so far."""
    with path.open("a") as stream:
        stream.write(json.dumps(_clean(record), sort_keys=True) + "\n")
        stream.flush()


def load(paths: list[Path]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The run headers and the case records of one or more results files."""
    runs: list[dict[str, Any]] = []
    cases: list[dict[str, Any]] = []
    for path in paths:
        for line in path.read_text().splitlines():
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line cut by a kill
            (runs if record.get("record") == "run" else cases).append(record)
    return runs, cases


def number(value: Any) -> float | None:
    """A finite float from a record field, or None."""
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None
