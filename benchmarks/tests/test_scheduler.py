"""The scheduler with real worker processes that only speak the protocol (no models): units
run concurrently, measurements never overlap, failures and limits become records."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest

from benchmarks import scheduler
from benchmarks.scheduler import Limits, run_tasks, units

WORKER = "benchmarks.tests.protocol_worker"


def _task(model: str, backend: str, *script: list[Any], mode: str = "inference") -> dict[str, Any]:
    return {
        "id": f"{model}/{mode}/float32/{backend}",
        "model": model,
        "mode": mode,
        "dtype": "float32",
        "backend": backend,
        "script": list(script),
    }


def _run(
    tmp_path: Path,
    tasks: list[dict[str, Any]],
    jobs: int,
    limits: Limits | None = None,
    pause_others: bool = True,
) -> dict[str, dict[str, Any]]:
    emitted: dict[str, dict[str, Any]] = {}

    def emit(task: dict[str, Any], record: dict[str, Any]) -> None:
        assert task["id"] not in emitted, "a task was reported twice"
        emitted[task["id"]] = record

    with (tmp_path / "worker.log").open("a") as log:
        run_tasks(
            tasks,
            {"lock_path": str(tmp_path / "lock"), "pause_others": pause_others},
            limits or Limits(60.0, 120.0, 300.0),
            log,
            emit,
            jobs=jobs,
            worker_module=WORKER,
        )
    assert set(emitted) == {t["id"] for t in tasks}
    return emitted


def test_units_keep_one_model_together() -> None:
    tasks = [_task("a", "eager"), _task("a", "x"), _task("b", "eager"), _task("a", "y")]
    assert [[t["backend"] for t in unit] for unit in units(tasks)] == [
        ["eager", "x"],
        ["eager"],
        ["y"],
    ]


def test_models_overlap_but_measurements_do_not(tmp_path: Path) -> None:
    tasks = [
        _task(model, backend, ["work", 0.4], ["measure", 0.15], ["work", 0.1], ["measure", 0.15])
        for model in ("a", "b", "c")
        for backend in ("eager", "compiled")
    ]
    records = _run(tmp_path, tasks, jobs=3)
    assert all(r["status"] == "pass" for r in records.values())
    assert len({r["pid"] for r in records.values()}) == 3  # one worker per model
    intervals = sorted(i for r in records.values() for i in r["intervals"])
    for (_, end), (begin, _) in itertools.pairwise(intervals):
        assert begin >= end, "two workers measured at the same time"
    spans = [records[f"{m}/inference/float32/eager"]["span"] for m in ("a", "b", "c")]
    assert max(s[0] for s in spans) < min(s[1] for s in spans), "the workers did not overlap"


def test_one_job_runs_in_order_in_one_worker(tmp_path: Path) -> None:
    tasks = [_task(m, b, ["measure", 0.01]) for m in ("a", "b") for b in ("eager", "compiled")]
    records = _run(tmp_path, tasks, jobs=1)
    assert len({r["pid"] for r in records.values()}) == 1
    starts = [records[t["id"]]["span"][0] for t in tasks]
    assert starts == sorted(starts)


def test_failed_eager_baseline_skips_its_group_only(tmp_path: Path) -> None:
    tasks = [
        _task("a", "eager"),
        _task("a", "compiled", ["measure", 0.01]),
        _task("a", "eager", ["measure", 0.01], mode="training"),
        _task("a", "compiled", ["measure", 0.01], mode="training"),
    ]
    tasks[0]["status"] = "error"
    records = _run(tmp_path, tasks, jobs=1)
    assert records["a/inference/float32/compiled"]["status"] == "skipped"
    assert "eager baseline error" in records["a/inference/float32/compiled"]["error"]
    assert records["a/training/float32/compiled"]["status"] == "pass"


def test_crash_while_measuring_frees_the_lock(tmp_path: Path) -> None:
    tasks = [
        _task("a", "eager", ["crash_holding"]),
        _task("a", "compiled", ["measure", 0.01]),
        _task("b", "eager", ["work", 0.2], ["measure", 0.05]),
        _task("b", "compiled", ["measure", 0.05]),
    ]
    records = _run(tmp_path, tasks, jobs=2)
    assert records["a/inference/float32/eager"]["status"] == "error"
    assert "exited with code 4" in records["a/inference/float32/eager"]["error"]
    assert records["a/inference/float32/compiled"]["status"] == "skipped"
    assert records["b/inference/float32/eager"]["status"] == "pass"
    assert records["b/inference/float32/compiled"]["status"] == "pass"


@pytest.mark.parametrize("pause_others", [False, True])
def test_other_workers_measurements_are_not_charged_to_a_case(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pause_others: bool
) -> None:
    monkeypatch.setattr(scheduler, "MINIMUM_CASE_S", 0.5)
    limits = Limits(case_s=2.0, model_s=60.0, total_s=60.0)
    tasks = [
        _task("a", "eager", ["measure", 2.5]),  # holds the lock past the other case's limit
        _task("b", "eager", ["work", 0.8], ["measure", 0.05], ["work", 0.6]),
        _task("c", "eager", ["hang"]),
    ]
    records = _run(tmp_path, tasks, jobs=3, limits=limits, pause_others=pause_others)
    # a measures for longer than its limit: cut off, which frees the lock (and resumes the
    # others). b spent about 1.2 s waiting for the lock (or 2 s paused by a) and 1.45 s
    # working: past its 2 s limit only if that time were charged to it.
    assert records["a/inference/float32/eager"]["status"] == "timeout"
    assert records["b/inference/float32/eager"]["status"] == "pass"
    if not pause_others:
        assert records["b/inference/float32/eager"]["lock_wait_s"] > 0.6
    assert records["c/inference/float32/eager"]["status"] == "timeout"


def test_workers_stay_paused_through_a_measurement(tmp_path: Path) -> None:
    tasks = [
        _task("a", "eager", ["work", 0.5], ["measure", 1.0]),
        _task("b", "eager", ["tick", 2.5]),
        _task("c", "eager", ["work", 0.2]),  # done, and its worker stopped, while a measures
    ]
    records = _run(tmp_path, tasks, jobs=3)
    assert all(r["status"] == "pass" for r in records.values())
    ((begin, end),) = records["a/inference/float32/eager"]["intervals"]
    ticks = records["b/inference/float32/eager"]["ticks"]
    assert [t for t in ticks if begin + 0.05 < t < end - 0.05] == []
    assert any(t < begin for t in ticks) and any(t > end for t in ticks)


def test_a_dead_cuda_context_gets_a_fresh_worker(tmp_path: Path) -> None:
    tasks = [
        _task("a", "eager", ["measure", 0.01]),
        _task("a", "compiled", ["sticky"]),  # e.g. an illegal memory access in a kernel
        _task("a", "other", ["measure", 0.01]),
    ]
    records = _run(tmp_path, tasks, jobs=1)
    broken = records["a/inference/float32/compiled"]
    assert broken["status"] == "error"
    assert broken["error_class"] == "illegal_memory_access"
    after = records["a/inference/float32/other"]
    assert after["status"] == "pass"  # not blamed for the exit of the worker before it
    assert after["pid"] != broken["pid"]


def test_a_case_cut_off_by_the_end_of_the_run_is_skipped_not_timed_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(scheduler, "MINIMUM_CASE_S", 0.5)
    tasks = [_task("a", "eager", ["work", 0.1]), _task("a", "compiled", ["hang"])]
    records = _run(tmp_path, tasks, jobs=1, limits=Limits(60.0, 60.0, 3.0))
    assert records["a/inference/float32/compiled"]["status"] == "skipped"
    assert "ran out" in records["a/inference/float32/compiled"]["error"]
