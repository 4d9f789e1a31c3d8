"""Compiling for sm_90 without a GPU: our signature and specialization reach the PTX (the
aligned variant vectorizes an unmasked copy, the unaligned one cannot), sizes stay unspecialized;
and a CPU tensor given to a compiled (GPU) kernel is refused naming its parameter. The checks
live in compile_checks.py and run in a process that compiles Triton."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("triton")

from .compiling import run_compile_checks  # noqa: E402


def test_variants_and_cpu_tensors_in_compiled_mode(tmp_path: Path) -> None:
    results = run_compile_checks(tmp_path, "aligned_variants", "cpu_tensor_is_explained")
    failed = {name: text for name, text in results.items() if text != "ok"}
    assert len(results) == 2 and not failed, "\n".join(failed.values())
