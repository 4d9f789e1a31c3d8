"""The compile report without a browser: `EMBER_REPORT` writes the page when the process
exits, with each compiled frame's source line, the graph break and the recompile and its
reason; topics the user did not ask for are recorded without being printed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from ember.capture.report import SECTIONS

PROGRAM = """
import torch
import ember.capture as capture

def step(x, n):
    y = torch.sin(x) * n
    print("a graph break")
    return y.cos()

compiled = capture.compile(step, backend="eager")
compiled(torch.randn(3), 2)
compiled(torch.randn(3), 3)  # n is specialized: a recompile
"""


def test_ember_report_writes_the_page_at_exit(tmp_path: Path) -> None:
    script = tmp_path / "program.py"
    script.write_text(PROGRAM)
    result = subprocess.run(
        [sys.executable, str(script)],
        env={**os.environ, "EMBER_REPORT": str(tmp_path / "report")},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "[ember" not in result.stderr  # recorded, not printed
    pages = list((tmp_path / "report").glob("ember-report-*.html"))
    assert len(pages) == 1
    page = pages[0].read_text()
    for key, title in SECTIONS.items():
        assert f'<section id="{key}"><h2>{title}</h2>' in page
    assert f"{script}:5" in page  # the frame's source line
    assert "print()" in page  # the graph break's reason
    assert "n changed from 2 to 3" in page  # the recompile's reason
