"""The Markdown dashboard: per suite and backend Passrate, Speedup (geomean), Comptime and
Memory, in the style of PyTorch 2's dashboard, then a per-model table and the failures.

Speedup and Memory are ratios to eager in the same group (higher is better for both:
Memory is eager peak / backend peak). Comptime is the first call minus a steady step.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from benchmarks.environment import describe
from benchmarks.records import number

RAN = ("pass", "fail_accuracy", "error", "timeout")


def geomean(values: Iterable[float]) -> float | None:
    """Geometric mean of the positive values, or None when there are none."""
    logs = [math.log(v) for v in values if v > 0]
    return math.exp(sum(logs) / len(logs)) if logs else None


def relate(cases: list[dict[str, Any]]) -> None:
    """Fills speedup and memory_ratio from the eager case of the same group where missing."""
    eager = {
        _group(c): c for c in cases if c.get("backend") == "eager" and c.get("status") == "pass"
    }
    for case in cases:
        baseline = eager.get(_group(case))
        if baseline is None:
            continue
        ms, base_ms = number(case.get("median_ms")), number(baseline.get("median_ms"))
        if case.get("speedup") is None and ms and base_ms:
            case["speedup"] = base_ms / ms
        peak, base_peak = (
            number(case.get("peak_memory_bytes")),
            number(baseline.get("peak_memory_bytes")),
        )
        if case.get("memory_ratio") is None and peak and base_peak:
            case["memory_ratio"] = base_peak / peak


def _group(case: dict[str, Any]) -> tuple:
    return tuple(case.get(k) for k in ("run_id", "device", "size", "model", "mode", "dtype"))


def _format(value: float | None, pattern: str, missing: str = "–") -> str:
    return missing if value is None else pattern.format(value)


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def summary_rows(cases: list[dict[str, Any]]) -> list[list[str]]:
    """One row per (dtype, mode, suite, backend) with the four headline figures."""
    groups: dict[tuple, list[dict[str, Any]]] = defaultdict(list)
    for case in cases:
        groups[(case["dtype"], case["mode"], case["suite"], case["backend"])].append(case)
    rows = []
    for (dtype, mode, suite, backend), members in sorted(groups.items(), key=_summary_order):
        ran = [c for c in members if c.get("status") in RAN]
        passed = [c for c in ran if c.get("status") == "pass"]
        if not ran:
            continue  # listed under "Not passing" with the reason
        speedups = [v for c in passed if (v := number(c.get("speedup"))) is not None]
        cold = [v for c in passed if (v := number(c.get("compile_cold_s"))) is not None]
        warm = [v for c in passed if (v := number(c.get("compile_warm_s"))) is not None]
        memory = [v for c in passed if (v := number(c.get("memory_ratio"))) is not None]
        skipped = len([c for c in members if c.get("status") == "skipped"])
        passrate = f"{100 * len(passed) / len(ran):.0f}% ({len(passed)}/{len(ran)})"
        if skipped:
            passrate += f", {skipped} skipped"
        rows.append(
            [
                dtype,
                mode,
                suite,
                backend,
                passrate,
                _format(geomean(speedups), "{:.2f}x"),
                _format(_mean(cold), "{:.1f}") + " / " + _format(_mean(warm), "{:.1f}"),
                _format(geomean(memory), "{:.2f}x"),
            ]
        )
    return rows


def _summary_order(item: tuple) -> tuple:
    (dtype, mode, suite, backend), _ = item
    backend_rank = 0 if backend == "eager" else 1 if backend.startswith("torch.compile") else 2
    return (dtype != "float32", mode != "inference", suite, backend_rank, backend)


def model_rows(cases: list[dict[str, Any]]) -> list[list[str]]:
    """One row per case, grouped by model."""
    rows = []
    for case in sorted(cases, key=_model_order):
        if case.get("status") == "not_available":
            continue  # listed under "Not passing" with the reason
        graphs = case.get("graphs")
        breaks = case.get("graph_breaks")
        rows.append(
            [
                case["model"],
                case["mode"],
                case["dtype"],
                case["backend"],
                case.get("status", "?"),
                _format(number(case.get("median_ms")), "{:.2f}"),
                _format(number(case.get("speedup")), "{:.2f}x"),
                _format(number(case.get("compile_cold_s")), "{:.1f}"),
                _format(number(case.get("compile_warm_s")), "{:.1f}"),
                _format(number(case.get("peak_memory_bytes")), "{:.1f}", "–")
                if case.get("peak_memory_bytes") is None
                else f"{case['peak_memory_bytes'] / 2**20:.1f}",
                _format(number(case.get("memory_ratio")), "{:.2f}x"),
                "–" if graphs is None else f"{graphs} / {breaks if breaks is not None else '?'}",
                _format(number(case.get("accuracy_error")), "{:.1e}")
                if case.get("accuracy_error") is not None
                else "–",
            ]
        )
    return rows


def _model_order(case: dict[str, Any]) -> tuple:
    backend = case.get("backend", "")
    backend_rank = 0 if backend == "eager" else 1 if backend.startswith("torch.compile") else 2
    return (
        case["suite"],
        case["model"],
        case["dtype"] != "float32",
        case["mode"] != "inference",
        backend_rank,
        backend,
    )


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def failures(cases: list[dict[str, Any]]) -> list[str]:
    """One line per case that did not pass; not-available and skipped cases folded by reason."""
    lines: list[str] = []
    folded: dict[tuple[str, str], tuple[set[str], set[str]]] = defaultdict(lambda: (set(), set()))
    for case in sorted(cases, key=_model_order):
        status = case.get("status")
        if status == "pass":
            continue
        detail = case.get("accuracy_detail")
        if case.get("error_class") == "dropout_statistics":
            detail = case.get("dropout_detail")
        first_line = (case.get("error") or detail or "").strip().splitlines()
        reason = first_line[0][:200] if first_line else ""
        if status in ("not_available", "skipped"):
            backends, models = folded[(status, reason)]
            backends.add(case["backend"])
            models.add(case["model"])
            continue
        where = f"`{case['model']}` {case['mode']} {case['dtype']} **{case['backend']}**"
        kind = f" ({case['error_class']})" if case.get("error_class") else ""
        lines.append(f"- {where}: {status}{kind}: {reason}")
    for (status, reason), (backends, models) in sorted(folded.items()):
        lines.append(f"- {status}: {', '.join(sorted(backends))} on {_listing(models)}: {reason}")
    return lines


def failure_class_rows(cases: list[dict[str, Any]]) -> list[list[str]]:
    """Per backend and mode, how many cases failed in each class (see benchmarks/failures.py)."""
    counts: dict[tuple[str, str, str], dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for case in cases:
        if case.get("status") in ("fail_accuracy", "error", "timeout"):
            key = (case.get("dtype", ""), case.get("mode", ""), case.get("backend", ""))
            counts[key][case.get("error_class") or case["status"]] += 1
    return [
        [dtype, mode, backend, ", ".join(f"{name} {n}" for name, n in sorted(classes.items()))]
        for (dtype, mode, backend), classes in sorted(counts.items())
    ]


STATUS_MARK = {
    "pass": "pass",
    "fail_accuracy": "**wrong**",
    "error": "**error**",
    "timeout": "**timeout**",
}


def latest_status(cases: list[dict[str, Any]]) -> dict[tuple[str, str, str, str], dict[str, Any]]:
    """The last case that ran per (model, mode, dtype, backend), over every run given (a
    later run's result replaces an earlier one; skipped and not-available never replace)."""
    latest: dict[tuple[str, str, str, str], dict[str, Any]] = {}
    for case in cases:
        if case.get("status") in STATUS_MARK:
            latest[(case["model"], case["mode"], case["dtype"], case["backend"])] = case
    return latest


def matrix_rows(cases: list[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """One row per model and dtype: each (mode, backend)'s latest status, with its class."""
    latest = latest_status(cases)
    columns = sorted({(mode, backend) for _, mode, _, backend in latest}, key=_column_order)
    rows = []
    for model, dtype in sorted({(m, d) for m, _, d, _ in latest}):
        row = [model, dtype]
        for mode, backend in columns:
            case = latest.get((model, mode, dtype, backend))
            if case is None:
                row.append("–")
                continue
            mark = STATUS_MARK[case["status"]]
            kind = case.get("error_class")
            row.append(f"{mark} ({kind})" if kind and case["status"] != "pass" else mark)
        rows.append(row)
    header = ["model", "dtype", *(f"{mode} {backend}" for mode, backend in columns)]
    return header, rows


def _column_order(column: tuple[str, str]) -> tuple:
    mode, backend = column
    rank = 0 if backend == "eager" else 1 if backend.startswith("torch.compile") else 2
    return (mode != "inference", rank, backend)


def pass_count_lines(cases: list[dict[str, Any]]) -> list[str]:
    """Pass counts per mode and backend, on the models each ran and on the models every
    backend ran (the fair comparison), from the latest status of each case."""
    latest = latest_status(cases)
    lines = []
    for mode, dtype in sorted({(mo, d) for _, mo, d, _ in latest}):
        backends = sorted({b for _, mo, d, b in latest if (mo, d) == (mode, dtype)})
        ran = {
            b: {m for m, mo, d, bb in latest if (mo, d, bb) == (mode, dtype, b)} for b in backends
        }
        common = set.intersection(*ran.values()) if ran else set()
        parts = []
        for backend in backends:
            passed = {
                m for m in ran[backend] if latest[(m, mode, dtype, backend)]["status"] == "pass"
            }
            parts.append(
                f"{backend} {len(passed)}/{len(ran[backend])} "
                f"({len(passed & common)}/{len(common)} on the {len(common)} all ran)"
            )
        lines.append(f"- {mode} {dtype}: " + "; ".join(parts))
    return lines


def _listing(names: set[str], shown: int = 6) -> str:
    ordered = sorted(names)
    more = f" and {len(ordered) - shown} more" if len(ordered) > shown else ""
    return ", ".join(ordered[:shown]) + more


def concurrency_lines(run: dict[str, Any], cases: list[dict[str, Any]]) -> list[str]:
    """How many workers ran at once, their CPU shares, and the lock waits of the run's cases."""
    plan = run.get("concurrency")
    if not plan:
        return []
    waits = [
        v for c in cases if c.get("run_id") == run["run_id"] and (v := number(c.get("lock_wait_s")))
    ]
    held = [
        v for c in cases if c.get("run_id") == run["run_id"] and (v := number(c.get("lock_held_s")))
    ]
    return [
        f"  - concurrency: {plan.get('jobs')} jobs on {plan.get('cores')} cores, compile threads "
        f"{plan.get('compile_threads') or 'default'} per job; measurement lock held "
        f"{sum(held):.0f} s, waited {sum(waits):.0f} s in all (longest wait "
        f"{max(waits, default=0.0):.1f} s)"
    ]


def render(runs: list[dict[str, Any]], cases: list[dict[str, Any]], title: str) -> str:
    """The whole dashboard as Markdown."""
    relate(cases)
    parts = [f"# {title}", ""]
    for run in runs:
        parts += [
            f"- **Run {run['run_id']}**"
            + (f" (resumed; {run['resumed']} cases kept)" if run.get("resumed") else "")
            + f" on `{run['device']}`, {run['size']} models: "
            + describe(run["environment"]),
            f"  - command: `{run['command']}`; settings: {run['settings']}; limits (s): {run['limits']}",
            *concurrency_lines(run, cases),
        ]
    parts += [
        "",
        "Speedup and Memory are geometric means over passing cases of eager / backend (higher is "
        "better). Comptime is mean seconds of (first call − steady step), cold / warm. Passrate "
        "counts cases that ran; an accuracy failure or an error counts against it.",
        "",
        "## Summary",
        "",
        _table(
            [
                "dtype",
                "mode",
                "suite",
                "backend",
                "Passrate",
                "Speedup (geomean)",
                "Comptime cold / warm (s)",
                "Memory (geomean)",
            ],
            summary_rows(cases),
        ),
        "",
        "## Per model",
        "",
        _table(
            [
                "model",
                "mode",
                "dtype",
                "backend",
                "status",
                "median ms",
                "speedup",
                "cold s",
                "warm s",
                "peak MiB",
                "memory",
                "graphs / breaks",
                "rel. error",
            ],
            model_rows(cases),
        ),
        "",
        "## Models × backends (latest result of each case over the runs above)",
        "",
        *pass_count_lines(cases),
        "",
        _table(*matrix_rows(cases)),
        "",
        "## Not passing",
        "",
        _table(["dtype", "mode", "backend", "failures by class"], failure_class_rows(cases))
        if failure_class_rows(cases)
        else "",
        "",
        *(failures(cases) or ["- none"]),
        "",
    ]
    return "\n".join(parts)
