"""What an interrupted run already measured, so that `--resume` plans only the rest.

A run of the whole suite under three backends needs more wall time than one call on the GPU
machine allows. `python -m benchmarks.run --resume --out DIR` continues the run recorded in
DIR/results.jsonl: it keeps that run's id (so eager, torch.compile and ember cases of one
model relate to each other, whichever call measured them) and plans only the cases that have
no result yet. A case that was cut off by the run's budget is recorded as `skipped` and is
planned again, and so is a timeout that was given less than the run's per-case limit (the
per-model budget ran out while the model's other backends compiled: it says nothing about
this backend); any other status (pass, accuracy failure, error, a timeout at the full case
limit, not available) is a result and is kept.
"""

from __future__ import annotations

import re
from pathlib import Path

from benchmarks import records


def case_id(case: dict) -> str:
    """The task id a case record was planned under (`model/mode/dtype/backend`)."""
    return "/".join(str(case.get(k)) for k in ("model", "mode", "dtype", "backend"))


_ALLOWED = re.compile(r"no result within (\d+(?:\.\d+)?) s")


def _allowed_s(case: dict) -> float | None:
    """The seconds a timed-out case was given (older records say it only in their error)."""
    if isinstance(case.get("allowed_s"), int | float):
        return float(case["allowed_s"])
    found = _ALLOWED.search(str(case.get("error") or ""))
    return float(found.group(1)) if found else None


def is_result(case: dict, case_limit_s: float | None) -> bool:
    """Whether a case record says something about its backend on its model."""
    status = case.get("status")
    if status in (None, "skipped"):
        return False
    if status == "timeout" and case_limit_s is not None:
        allowed = _allowed_s(case)
        return allowed is None or allowed >= case_limit_s - 1.0
    return True


def finished(results: Path) -> tuple[str, set[str]]:
    """The run id of the results file's first run and the ids of its cases with a result."""
    runs, cases = records.load([results])
    if not runs:
        raise SystemExit(f"--resume: {results} has no run header")
    run_id = str(runs[0]["run_id"])
    case_limit = runs[0].get("limits", {}).get("case_s")
    latest = {case_id(c): c for c in cases if c.get("run_id") == run_id}
    done = {key for key, case in latest.items() if is_result(case, case_limit)}
    return run_id, done
