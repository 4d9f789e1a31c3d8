"""`python -m benchmarks.report RESULTS.jsonl... [--out DIR]`: dashboard and chart from results.

The runner calls `write` after every case (dashboard only) and at the end (with the chart);
run it by hand to rebuild both from results fetched from another machine.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from benchmarks import chart, dashboard, records
from benchmarks.environment import describe

TITLE = "ember benchmark dashboard"


def write(out: Path, results: list[Path], with_chart: bool = True) -> None:
    """Writes dashboard.md (and speedup.png) into `out` from the given results files."""
    runs, cases = records.load(results)
    text = dashboard.render(runs, cases, TITLE)
    if with_chart:
        subtitle = describe(runs[0]["environment"]) if runs else ""
        problem = chart.draw(cases, out / "speedup.png", subtitle)
        text += f"\n{problem}\n" if problem else "\n![speedup per model](speedup.png)\n"
    (out / "dashboard.md").write_text(text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.report", description=__doc__)
    parser.add_argument("results", nargs="+", type=Path)
    parser.add_argument("--out", type=Path, help="output folder (default: beside the first file)")
    arguments = parser.parse_args(argv)
    out = arguments.out or arguments.results[0].parent
    out.mkdir(parents=True, exist_ok=True)
    write(out, arguments.results)
    print(f"wrote {out / 'dashboard.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
