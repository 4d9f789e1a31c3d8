"""The PNG chart: speedup over eager per model, torch.compile next to each ember backend.

One panel per (mode, dtype); bars only for cases that passed. Needs matplotlib; without it
the report says so and writes no chart.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from benchmarks.records import number


def draw(cases: list[dict[str, Any]], path: Path, subtitle: str) -> str | None:
    """Writes the chart to `path`; returns why not, when it could not."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as error:
        return f"no chart: matplotlib does not import ({error})"
    compiled = [
        c
        for c in cases
        if c.get("backend") != "eager" and c.get("status") == "pass" and number(c.get("speedup"))
    ]
    panels = sorted(
        {(c["mode"], c["dtype"]) for c in compiled},
        key=lambda p: (p[1] != "float32", p[0] != "inference"),
    )
    if not panels:
        return "no chart: no passing compiled case"
    backends = sorted(
        {c["backend"] for c in compiled}, key=lambda b: (not b.startswith("torch"), b)
    )
    figure, axes = plt.subplots(len(panels), 1, figsize=(12, 3.6 * len(panels)), squeeze=False)
    width = 0.8 / len(backends)
    for axis, (mode, dtype) in zip(axes[:, 0], panels, strict=True):
        models = sorted({c["model"] for c in compiled if (c["mode"], c["dtype"]) == (mode, dtype)})
        for index, backend in enumerate(backends):
            speedups = {
                c["model"]: c["speedup"]
                for c in compiled
                if (c["mode"], c["dtype"], c["backend"]) == (mode, dtype, backend)
            }
            positions = [i + (index - (len(backends) - 1) / 2) * width for i in range(len(models))]
            axis.bar(positions, [speedups.get(m, 0.0) for m in models], width, label=backend)
        axis.axhline(1.0, color="black", linewidth=0.8)
        axis.set_xticks(range(len(models)), models, rotation=20, ha="right", fontsize=8)
        axis.set_ylabel("speedup over eager")
        axis.set_title(f"{mode}, {dtype}", fontsize=10)
        axis.legend(fontsize=8)
    figure.suptitle("ember benchmark: speedup per model\n" + subtitle, fontsize=9)
    absent = sorted({c["backend"] for c in cases if c.get("backend") != "eager"} - set(backends))
    if absent:
        figure.text(0.01, 0.005, "no passing case: " + ", ".join(absent), fontsize=8)
    figure.tight_layout(rect=(0, 0.02, 1, 1))
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return None
