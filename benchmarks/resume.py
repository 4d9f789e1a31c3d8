"""What an interrupted run already measured, so that `--resume` plans only the rest.

A run of the whole suite under three backends needs more wall time than one call on the GPU
machine allows. `python -m benchmarks.run --resume --out DIR` continues the run recorded in
DIR/results.jsonl: it keeps that run's id (so eager, torch.compile and ember cases of one
model relate to each other, whichever call measured them) and plans only the cases that have
no result yet. A case that was cut off by the run's budget is recorded as `skipped` and is
planned again; any other status (pass, accuracy failure, error, case timeout, not
available) is a result and is kept.
"""

from __future__ import annotations

from pathlib import Path

from benchmarks import records


def case_id(case: dict) -> str:
    """The task id a case record was planned under (`model/mode/dtype/backend`)."""
    return "/".join(str(case.get(k)) for k in ("model", "mode", "dtype", "backend"))


def finished(results: Path) -> tuple[str, set[str]]:
    """The run id of the results file's first run and the ids of its cases with a result."""
    runs, cases = records.load([results])
    if not runs:
        raise SystemExit(f"--resume: {results} has no run header")
    run_id = str(runs[0]["run_id"])
    done = {
        case_id(case)
        for case in cases
        if case.get("run_id") == run_id and case.get("status") not in (None, "skipped")
    }
    return run_id, done
