"""Repository-wide pytest setup.

Under `nox -s isolation` (EMBER_TEST_INSTALLED=1) the tests must exercise the installed
wheels, never the source tree: fail at once if `ember` resolves to packages/*/src.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent


def pytest_configure(config: pytest.Config) -> None:
    if os.environ.get("EMBER_TEST_INSTALLED") != "1":
        return
    import ember.prims

    location = Path(ember.prims.__file__).resolve()
    sources = (ROOT / "packages", ROOT / "src")
    if any(source in location.parents for source in sources):
        raise pytest.UsageError(
            f"EMBER_TEST_INSTALLED=1 but ember.prims comes from the source tree ({location}); "
            "the isolation session must test the installed wheels"
        )
