"""The compile report of the quick start's model (a small GPT-2: inference and a training
step through the inductor backend) renders in headless Chromium with every section present
and filled: frames with their source lines, graphs per stage (captured, autodiff's, inductor's
after its passes with the scheduled kernels), guards, generated kernels, times, cache, memory.

Chromium is Debian's `chromium` package; `nox -s tests` installs it when it is missing. Outside
CI a machine without it skips this test; under CI (CI=true) a missing browser fails it.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest
import torch
from torch import nn

import ember
from ember.capture.report import SECTIONS

ROOT = Path(__file__).resolve().parent.parent
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "chrome")


def _browser() -> str:
    for name in BROWSERS:
        found = shutil.which(name)
        if found:
            return found
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail("CI needs headless Chromium for the report test (nox -s tests installs it)")
    pytest.skip("no Chromium on this machine (apt-get install chromium)")


def _quickstart() -> object:
    spec = importlib.util.spec_from_file_location("quickstart", ROOT / "examples" / "quickstart.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class _Sections(HTMLParser):
    """Text of each <section id=...> of a page."""

    def __init__(self) -> None:
        super().__init__()
        self.text: dict[str, list[str]] = {}
        self._open: list[str | None] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "section":
            self._open.append(dict(attrs).get("id"))

    def handle_endtag(self, tag: str) -> None:
        if tag == "section" and self._open:
            self._open.pop()

    def handle_data(self, data: str) -> None:
        if self._open and self._open[-1]:
            self.text.setdefault(self._open[-1], []).append(data)


def _chromium(browser: str, *arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
         "--disable-dev-shm-usage", *arguments],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def test_quickstart_report_renders_every_section_in_chromium(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    browser = _browser()
    monkeypatch.setenv("EMBER_INDUCTOR_CACHE", "0")  # generate code, even if cached elsewhere
    quickstart = _quickstart()
    torch.manual_seed(0)
    ids = torch.randint(0, 2048, (2, 16))
    title = "examples/quickstart.py: GPT-2 inference and a training step"
    with ember.compile_report(tmp_path, title) as report:
        model = quickstart.build_model().eval()  # type: ignore[attr-defined]
        with torch.no_grad():
            ember.compile(model)(ids)
        trained = quickstart.build_model().train()  # type: ignore[attr-defined]
        logits = ember.compile(trained)(ids)
        nn.functional.cross_entropy(logits.flatten(0, 1), ids.flatten()).backward()
    page = report.path
    assert page.is_file()
    rendered = _chromium(browser, "--dump-dom", page.as_uri())
    assert rendered.returncode == 0, rendered.stderr[-2000:]
    parser = _Sections()
    parser.feed(rendered.stdout)
    text = {key: " ".join(parts) for key, parts in parser.text.items()}
    assert set(SECTIONS) <= set(text), set(SECTIONS) - set(text)
    for key, title in SECTIONS.items():
        assert text[key].strip().startswith(title)
    assert "quickstart.py:34" in text["frames"]  # LogitsOnly.forward, the compiled frame
    for stage in (
        "capture: captured",
        "autodiff: partition (backward)",
        "after its graph passes",
        "scheduled:",
    ):
        assert stage in text["graphs"], stage
    assert "@triton.jit" in text["kernels"] or 'extern "C"' in text["kernels"]
    assert "inductor: lower" in text["times"] and "guard(s)" in text["guards"]
    assert "planned_peak_bytes" in text["memory"]
    shot = tmp_path / "report.png"
    _chromium(browser, f"--screenshot={shot}", "--window-size=1280,1600", page.as_uri())
    assert shot.is_file() and shot.stat().st_size > 10_000
    if os.environ.get("EMBER_REPORT_SCREENSHOT"):  # refreshes docs/images/compile-report.png
        shutil.copy(shot, os.environ["EMBER_REPORT_SCREENSHOT"])
