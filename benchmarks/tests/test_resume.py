"""`--resume`: a run continued in a second call keeps its id and plans only the missing cases."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from benchmarks import records, resume
from benchmarks import run as run_module


def _write_run(path: Path, statuses: dict[str, str], errors: dict[str, str] | None = None) -> None:
    header = {"record": "run", "run_id": "20260101-000000", "device": "cpu"}
    records.append(path, {**header, "limits": {"case_s": 240.0}})
    for task_id, status in statuses.items():
        model, mode, dtype, backend = task_id.split("/")
        records.append(
            path,
            {
                "record": "case",
                "run_id": "20260101-000000",
                "model": model,
                "mode": mode,
                "dtype": dtype,
                "backend": backend,
                "status": status,
                "error": (errors or {}).get(task_id),
            },
        )


def test_finished_keeps_results_and_replans_budget_cuts(tmp_path: Path) -> None:
    results = tmp_path / "results.jsonl"
    _write_run(
        results,
        {
            "mlp/inference/float32/eager": "pass",
            "mlp/inference/float32/ember:inductor": "error",
            "mlp/training/float32/eager": "timeout",
            "mlp/training/float32/ember:inductor": "skipped",
        },
    )
    run_id, done = resume.finished(results)
    assert run_id == "20260101-000000"
    assert done == {
        "mlp/inference/float32/eager",
        "mlp/inference/float32/ember:inductor",
        "mlp/training/float32/eager",
    }


def test_resumed_run_plans_only_missing_cases_under_the_same_id(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    results = tmp_path / "results.jsonl"
    _write_run(
        results,
        {"mlp/inference/float32/eager": "pass", "mlp/training/float32/eager": "skipped"},
    )
    planned: list[dict[str, Any]] = []
    monkeypatch.setattr(
        run_module, "run_tasks", lambda tasks, *args, **kwargs: planned.extend(tasks)
    )
    monkeypatch.setattr(run_module.report, "write", lambda *args, **kwargs: None)
    argv = ["--models", "mlp", "--backends", "eager", "--out", str(tmp_path), "--resume"]
    assert run_module.main(argv) == 0
    assert [task["id"] for task in planned] == ["mlp/training/float32/eager"]
    headers = [
        json.loads(line) for line in results.read_text().splitlines() if '"record": "run"' in line
    ]
    assert [h["run_id"] for h in headers] == ["20260101-000000", "20260101-000000"]
    assert headers[-1]["resumed"] == 1


def test_resume_without_a_results_file_stops(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="does not exist"):
        run_module.main(["--models", "mlp", "--out", str(tmp_path), "--resume"])


def test_a_timeout_cut_short_by_the_model_budget_is_planned_again(tmp_path: Path) -> None:
    results = tmp_path / "results.jsonl"
    _write_run(
        results,
        {
            "swin/training/bf16/torch.compile": "pass",
            "swin/training/bf16/ember:inductor": "timeout",
            "t5/training/bf16/ember:inductor": "timeout",
        },
        errors={
            "swin/training/bf16/ember:inductor": "no result within 12 s",  # model budget
            "t5/training/bf16/ember:inductor": "no result within 240 s",  # the case limit
        },
    )
    _, done = resume.finished(results)
    assert done == {"swin/training/bf16/torch.compile", "t5/training/bf16/ember:inductor"}
