"""kernel_compare's report: the backends side by side, each compiler's speedup over eager per
mode with its first-call seconds (compile and autotuning), and each case's kernels by class.

`report` is `kernels.md`; `summary` is the part a run prints at its end (the table, the
speedups and the errors, without the kernel lists). A case is a model and mode under one
compile mode; a run under `--compile-mode max-autotune` labels its modes "inference,
max-autotune".
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from pathlib import Path
from typing import Any

from benchmarks.kernel_compare import BACKENDS, COMPILERS

Case = dict[str, dict[str, Any]]  # backend -> its record


def load(paths: list[Path]) -> list[dict[str, Any]]:
    records = []
    for path in paths:
        for line in path.read_text().splitlines():
            if line.strip():
                records.append(json.loads(line))
    return records


def environment_of(folder: Path) -> dict[str, Any]:
    path = folder / "environment.json"
    return json.loads(path.read_text()) if path.exists() else {}


def _fmt(value: float | None, digits: int = 2) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def _error(value: float | None) -> str:
    return "–" if value is None else f"{value:.1e}"


def _ratio(a: float | None, b: float | None) -> str:
    return "–" if not a or not b else f"{a / b:.2f}x"


def compile_mode_of(record: dict[str, Any]) -> str:
    return str(record.get("compile_mode") or "default")


def mode_label(mode: str, compile_mode: str) -> str:
    """The mode column: "training", or "training, max-autotune" outside the default mode."""
    return mode if compile_mode == "default" else f"{mode}, {compile_mode}"


def by_case(records: list[dict[str, Any]]) -> dict[tuple[str, str], Case]:
    """Records by (model, mode label), then backend (a later record of a backend wins)."""
    cases: dict[tuple[str, str], Case] = defaultdict(dict)
    for record in records:
        label = mode_label(record["mode"], compile_mode_of(record))
        cases[(record["model"], label)][record["backend"]] = record
    return dict(sorted(cases.items()))


def geomean(values: list[float]) -> float | None:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def _ok(case: Case, backend: str, key: str) -> float | None:
    """`key` of `backend`'s record where it ran to the end, else None."""
    record = case.get(backend, {})
    value = record.get(key)
    return float(value) if record.get("status") == "ok" and value else None


def _or_status(case: Case, backend: str, key: str, digits: int = 2) -> str:
    """The value, or why there is none (killed, error, absent)."""
    value = _ok(case, backend, key)
    if value is not None:
        return _fmt(value, digits)
    status = case.get(backend, {}).get("status")
    return status if status and status != "ok" else "–"


def _first_call(case: Case, backend: str) -> float | None:
    """First-call seconds less the pauses (records before compile_s: the first call)."""
    record = case.get(backend, {})
    if record.get("status") != "ok":
        return None
    value = record.get("compile_s", record.get("first_call_s"))
    return None if value is None else float(value)


def table(cases: dict[tuple[str, str], Case]) -> list[str]:
    """The side-by-side table: GPU ms, wall ms, peak MiB and error of every case."""
    lines = [
        "| model | mode | eager GPU ms | torch.compile GPU ms | ember GPU ms | ember/tc GPU | "
        "eager wall ms | tc wall ms | ember wall ms | eager peak MiB | tc peak MiB | "
        "ember peak MiB | ember/tc peak | ember peak, no reuse | tc error | ember error |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- "
        "| --- | --- |",
    ]
    for (model, mode), case in cases.items():

        def get(backend: str, key: str, case: Case = case) -> Any:
            return case.get(backend, {}).get(key)

        lines.append(
            f"| {model} | {mode} | {_fmt(get('eager', 'gpu_ms'))} | "
            f"{_fmt(get('torch.compile', 'gpu_ms'))} | {_fmt(get('ember', 'gpu_ms'))} | "
            f"{_ratio(get('ember', 'gpu_ms'), get('torch.compile', 'gpu_ms'))} | "
            f"{_fmt(get('eager', 'wall_ms'))} | {_fmt(get('torch.compile', 'wall_ms'))} | "
            f"{_fmt(get('ember', 'wall_ms'))} | {_fmt(get('eager', 'peak_mib'), 0)} | "
            f"{_fmt(get('torch.compile', 'peak_mib'), 0)} | {_fmt(get('ember', 'peak_mib'), 0)} | "
            f"{_ratio(get('ember', 'peak_mib'), get('torch.compile', 'peak_mib'))} | "
            f"{_fmt(get('ember-noreuse', 'peak_mib'), 0)} | "
            f"{_error(get('torch.compile', 'rel_error_vs_eager'))} | "
            f"{_error(get('ember', 'rel_error_vs_eager'))} |"
        )
    return lines


def _times(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}x"


def _speedup_rows(mode: str, models: dict[str, Case]) -> tuple[str, list[str]]:
    """One mode's line of geomeans (over the models where eager and both compilers ran to
    the end) and its per-model lines."""
    walls: dict[str, list[float]] = {c: [] for c in COMPILERS}
    gpus: dict[str, list[float]] = {c: [] for c in COMPILERS}
    first: dict[str, float] = dict.fromkeys(COMPILERS, 0.0)
    common, per_model = [], []
    for model, case in sorted(models.items()):
        eager_wall, eager_gpu = _ok(case, "eager", "wall_ms"), _ok(case, "eager", "gpu_ms")
        row = [model, mode, _or_status(case, "eager", "wall_ms")]
        row += [_or_status(case, c, "wall_ms") for c in COMPILERS]
        row += [_ratio(eager_wall, _ok(case, c, "wall_ms")) for c in COMPILERS]
        row += [_fmt(_first_call(case, c), 1) for c in COMPILERS]
        row += [_fmt(case.get(c, {}).get("graph_launches_per_step"), 0) for c in COMPILERS]
        per_model.append("| " + " | ".join(row) + " |")
        compiled = {c: _ok(case, c, "wall_ms") for c in COMPILERS}
        if eager_wall is None or None in compiled.values():
            continue
        common.append(model)
        for compiler, wall in compiled.items():
            walls[compiler].append(eager_wall / (wall or 1.0))
            gpu = _ok(case, compiler, "gpu_ms")
            if eager_gpu is not None and gpu is not None:
                gpus[compiler].append(eager_gpu / gpu)
            first[compiler] += _first_call(case, compiler) or 0.0
    tc, ours = geomean(walls["torch.compile"]), geomean(walls["ember"])
    line = (
        f"| {mode} | {len(common)} of {len(models)} | {_times(tc)} | {_times(ours)} | "
        f"{_ratio(ours, tc)} | {_times(geomean(gpus['torch.compile']))} | "
        f"{_times(geomean(gpus['ember']))} | {_fmt(first['torch.compile'], 1)} | "
        f"{_fmt(first['ember'], 1)} |"
    )
    return line, per_model


def speedups(records: list[dict[str, Any]]) -> list[str]:
    """Per compile mode and mode: each compiler's geomean speedup over eager (wall and GPU)
    and the first-call seconds of each compiler beside each other; then the same per model."""
    groups: dict[str, dict[str, dict[str, Case]]] = defaultdict(lambda: defaultdict(dict))
    for record in records:
        models = groups[compile_mode_of(record)][record["mode"]]
        models.setdefault(record["model"], {})[record["backend"]] = record
    lines: list[str] = []
    for compile_mode, modes in sorted(groups.items()):
        lines += [
            f"## Speedup over eager, compile mode {compile_mode}",
            "",
            "Speedup: eager's wall ms (median step) over the compiler's; GPU: the same with the "
            "profiler's GPU ms. Geomeans over the models where eager and both compilers ran to "
            "the end; ember / tc above 1 is ember faster. First call s: the first step "
            "(capture, compile, autotuning, the first run; training: forward and backward) "
            "less the time other workers' measurements paused the process, summed over those "
            "models.",
            "",
            "| mode | models | tc wall speedup | ember wall speedup | ember / tc | "
            "tc GPU speedup | ember GPU speedup | tc first call s | ember first call s |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        ]
        per_model: list[str] = []
        for mode, models in sorted(modes.items()):
            line, rows = _speedup_rows(mode, models)
            lines.append(line)
            per_model += rows
        lines += [
            "",
            "| model | mode | eager wall ms | tc wall ms | ember wall ms | tc speedup | "
            "ember speedup | tc first call s | ember first call s | tc graph launches/step | "
            "ember graph launches/step |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
            *per_model,
            "",
        ]
    return lines


def errors(records: list[dict[str, Any]], width: int = 600) -> list[str]:
    """A line for each case that did not run to the end (error, killed at the budget, ...)."""
    failed = [r for r in records if r.get("status") != "ok"]
    if not failed:
        return []
    lines = ["Errors:", ""]
    for record in failed:
        label = mode_label(record["mode"], compile_mode_of(record))
        status = record.get("status")
        text = ("" if status == "error" else f"{status}: ") + str(record.get("error"))[:width]
        lines.append(f"- {record['model']} {label} {record['backend']}: {text}")
    return [*lines, ""]


def _header(env: dict[str, Any] | None) -> list[str]:
    return [
        "# Kernel comparison: eager, torch.compile and ember",
        "",
        "GPU ms: kernel, memcpy and memset time per step (profiler); wall ms: median step "
        "(CUDA events, no profiler); peak: max allocated over the timed steps minus what was "
        "allocated before the module was built. Ratios are ember / torch.compile (lower is "
        "better for both). Error: relative L2 of the first step's logits (inference) or loss and "
        "gradients (training) against eager's.",
        "",
        "Environment: " + ", ".join(f"{k} {v}" for k, v in (env or {}).items() if v),
        "",
    ]


def summary(records: list[dict[str, Any]], env: dict[str, Any] | None = None) -> str:
    """What a run prints at its end: the table, the speedups and the errors, short."""
    lines = _header(env) + table(by_case(records)) + [""] + speedups(records)
    return "\n".join(lines + errors(records, width=240)) + "\n"


def _details(model: str, mode: str, case: Case, top: int) -> list[str]:
    """One case's kernel time by class and its slowest kernels, per backend."""
    lines = ["", f"## {model} {mode}", "", "By class (ms per step):", ""]
    backends = [b for b in BACKENDS[:3] if case.get(b, {}).get("status") == "ok"]
    if not backends:
        return [*lines, "No backend ran."]
    totals: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for backend in backends:
        for kernel in case[backend]["kernels"]:
            totals[kernel["class"]][backend] += kernel["ms_per_step"]
    lines.append("| class | " + " | ".join(backends) + " |")
    lines.append("| --- |" + " --- |" * len(backends))
    for name, row in sorted(totals.items(), key=lambda item: -max(item[1].values())):
        lines.append(f"| {name} | " + " | ".join(_fmt(row.get(b, 0.0), 3) for b in backends) + " |")
    for backend in backends:
        kernels = case[backend]["kernels"]
        lines += [
            "",
            f"Top kernels, {backend} ({len(kernels)} distinct):",
            "",
            "| ms/step | calls/step | class | launching op | kernel |",
            "| --- | --- | --- | --- | --- |",
        ]
        for kernel in kernels[:top]:
            lines.append(
                f"| {kernel['ms_per_step']:.3f} | {kernel['calls_per_step']:g} | "
                f"{kernel['class']} | {kernel['op'] or '–'} | `{kernel['kernel']}` |"
            )
    graphs = case.get("ember", {}).get("graph_memory")
    if graphs:
        lines += ["", "ember graphs' memory (MiB: allocated at entry, peak inside, at exit):", ""]
        for graph in graphs:
            lines.append(
                f"- {graph['graph']}: {graph['entry_mib']:.0f} / {graph['peak_mib']:.0f} / "
                f"{graph['exit_mib']:.0f}"
            )
    return lines


def report(paths: list[Path], env: dict[str, Any] | None = None, top: int = 12) -> str:
    """kernels.md: the table, the errors, the speedups, then every case's kernels."""
    records = load(paths)
    cases = by_case(records)
    lines = _header(env) + table(cases)
    failed = errors(records)
    if failed:
        lines += ["", *failed[:-1]]
    lines += ["", *speedups(records)]
    for (model, mode), case in cases.items():
        lines += _details(model, mode, case, top)
    return "\n".join(lines) + "\n"
