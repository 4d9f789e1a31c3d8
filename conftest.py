"""Repository-wide pytest setup.

Triton kernels run under its interpreter on machines without a GPU (CI): triton 3 reads
`TRITON_INTERPRET` when it defines each @triton.jit function, its own library's at import, so
the variable is set here, before any test imports triton. `EMBER_TEST_DEVICE=cuda` (the GPU
machine) or an explicit `TRITON_INTERPRET` leaves it alone; tests that compile real kernels
(PTX) run them in a subprocess with `TRITON_INTERPRET=0`.

Under `nox -s isolation` (EMBER_TEST_INSTALLED=1) the tests must exercise the installed
wheels, never the source tree: fail at once if `ember` resolves to packages/*/src.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent

# `benchmarks` (the repository's benchmark package, not an installed one) is imported by its own
# tests, by integration tests and by processes they spawn (torch.multiprocessing unpickles a
# `benchmarks` function in the child, with the parent's sys.path): under
# --import-mode=importlib nothing else puts the repository root on sys.path. The root holds no
# `ember` package, so the isolation session still imports ember from the installed wheels.
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

if os.environ.get("EMBER_TEST_DEVICE", "cpu") == "cpu":
    os.environ.setdefault("TRITON_INTERPRET", "1")


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
