"""The README's quick-start commands, .ci/run and the generated docs stay in step."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _readme_commands() -> list[str]:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    return re.findall(r"```sh\n(.+?)\n```", readme)


def test_readme_has_one_line_demo_and_test_commands() -> None:
    commands = _readme_commands()
    assert len(commands) == 2, commands
    demo, tests = commands
    assert "\n" not in demo and demo.endswith("nox -s demo")
    assert "\n" not in tests and "nox -s" in tests and "tests" in tests.split("nox -s")[1]


def test_ci_runs_the_readme_test_command() -> None:
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert _readme_commands()[1] in ci.splitlines()
    assert "set -euo pipefail" in ci
    assert os.access(ROOT / ".ci" / "run", os.X_OK)


def test_configuration_doc_is_current() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_config_docs.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr


def test_umbrella_reexports_the_prims_and_capture_api() -> None:
    import ember
    import ember.capture
    import ember.prims

    for layer in (ember.prims, ember.capture):
        for name in layer.__all__:
            assert getattr(ember, name) is getattr(layer, name)
            assert name in ember.__all__
    assert ember.compile is ember.capture.compile
