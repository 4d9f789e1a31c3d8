"""Dashboard figures from hand-made records: passrate, geomean speedup, failures listed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from benchmarks import records, report
from benchmarks.dashboard import geomean, relate, summary_rows

RUN = {
    "record": "run",
    "run_id": "r",
    "device": "cpu",
    "size": "small",
    "command": "python -m benchmarks.run",
    "settings": {},
    "limits": {},
    "environment": {
        "date": "2026-01-01T00:00:00+00:00",
        "machine": {"cpu": "cpu", "cpu_cores": 2, "torch_threads": 1, "gpus": []},
        "versions": {
            "python": "3.11",
            "torch": "2",
            "triton": None,
            "transformers": "5",
            "timm": None,
        },
        "ember": {"source": "source tree", "commit": "abc"},
    },
}


def _case(model: str, backend: str, status: str = "pass", **fields: Any) -> dict[str, Any]:
    return {
        "record": "case",
        "run_id": "r",
        "device": "cpu",
        "size": "small",
        "suite": "handwritten",
        "model": model,
        "mode": "inference",
        "dtype": "float32",
        "backend": backend,
        "status": status,
        **fields,
    }


def test_geomean() -> None:
    assert geomean([2.0, 8.0]) == 4.0
    assert geomean([]) is None


def test_relate_fills_speedup_from_eager() -> None:
    cases = [_case("a", "eager", median_ms=10.0), _case("a", "torch.compile", median_ms=5.0)]
    relate(cases)
    assert cases[1]["speedup"] == 2.0


def test_summary_counts_failures_against_passrate() -> None:
    cases = [
        _case("a", "eager", median_ms=10.0),
        _case("b", "eager", median_ms=10.0),
        _case("a", "torch.compile", median_ms=5.0, compile_cold_s=3.0),
        _case("b", "torch.compile", "error", error="RuntimeError: boom"),
        _case("a", "ember:eager", "not_available", error="ember.compile does not exist yet"),
    ]
    relate(cases)
    rows = {row[3]: row for row in summary_rows(cases)}
    assert rows["torch.compile"][4].startswith("50% (1/2)")
    assert rows["torch.compile"][5] == "2.00x"
    assert "ember:eager" not in rows  # nothing ran: listed under "Not passing" instead
    assert all(len(row) == 8 for row in rows.values())


def test_report_survives_a_cut_line(tmp_path: Path) -> None:
    results = tmp_path / "results.jsonl"
    records.append(results, RUN)
    records.append(results, _case("a", "eager", median_ms=1.0, speedup=float("nan")))
    with results.open("a") as stream:
        stream.write(json.dumps(_case("a", "torch.compile"))[:40])  # killed mid-write
    report.write(tmp_path, [results], with_chart=False)
    text = (tmp_path / "dashboard.md").read_text()
    assert "Passrate" in text and "| a | inference | float32 | eager | pass |" in text


def test_concurrency_and_lock_waits_are_shown() -> None:
    from benchmarks.dashboard import concurrency_lines

    run = {
        **RUN,
        "device": "cuda",
        "concurrency": {
            "jobs": 4,
            "cores": 16,
            "compile_threads": 3,
        },
    }
    cases = [
        _case("mlp", "eager", lock_wait_s=1.5, lock_held_s=2.0),
        _case("mlp", "torch.compile", lock_wait_s=0.5, lock_held_s=1.0),
    ]
    (line,) = concurrency_lines(run, cases)
    assert "4 jobs on 16 cores" in line and "compile threads 3" in line
    assert "held 3 s, waited 2 s" in line and "longest wait 1.5 s" in line
    assert concurrency_lines(RUN, cases) == []  # runs recorded before --jobs existed


def test_pass_counts_use_the_latest_result_and_the_common_models() -> None:
    from benchmarks.dashboard import matrix_rows, pass_count_lines

    cases = [
        _case("a", "eager"),
        _case("a", "ember:x", "error", error_class="illegal_memory_access"),
        _case("a", "ember:x"),  # a later run fixed it
        _case("b", "eager"),
        _case("b", "ember:x", "fail_accuracy", error_class="non_finite"),
        _case("b", "ember:x", "skipped"),  # a later run did not get to it: the failure stays
        _case("c", "eager"),  # ember never ran c: not in the common set
    ]
    (line,) = pass_count_lines(cases)
    assert "eager 3/3 (2/2 on the 2 all ran)" in line
    assert "ember:x 1/2 (1/2 on the 2 all ran)" in line
    header, rows = matrix_rows(cases)
    assert header[2:] == [f"{cases[0]['mode']} eager", f"{cases[0]['mode']} ember:x"]
    assert rows[1][3] == "**wrong** (non_finite)"
    assert rows[2][3] == "–"
