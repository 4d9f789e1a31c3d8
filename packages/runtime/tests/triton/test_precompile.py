"""Compiling for sm_90 without a GPU: our signature and specialization reach the PTX (the
aligned variant vectorizes an unmasked copy, the unaligned one cannot), sizes stay unspecialized.
The checks live in compile_checks.py and run in a process that compiles Triton."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("triton")

from .compiling import run_compile_checks  # noqa: E402


def test_aligned_and_unaligned_variants(tmp_path: Path) -> None:
    results = run_compile_checks(tmp_path, "aligned_variants")
    assert results == {"aligned_variants": "ok"}, results["aligned_variants"]
