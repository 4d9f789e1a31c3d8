"""`compile_kernels`: worker processes fill Triton's cache and the compiling process then only
hits it; one worker compiles in-process; a warm process starts no worker; a kernel that does not compile raises the compiler's
error in the caller. The compiling checks run in a process that compiles (compile_checks.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("triton")

from ember.runtime.triton.compile_pool import worker_count  # noqa: E402

from .compiling import run_compile_checks  # noqa: E402

CHECKS = (
    "workers_warm_the_cache",
    "one_worker_compiles_in_process",
    "warm_process_starts_no_worker",
    "broken_kernel_raises_here",
)


def test_compile_kernels(tmp_path: Path) -> None:
    results = run_compile_checks(tmp_path, *CHECKS)
    assert sorted(results) == sorted(CHECKS)
    failed = {name: text for name, text in results.items() if text != "ok"}
    assert not failed, "\n".join(failed.values())


def test_worker_count(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EMBER_COMPILE_THREADS", "3")
    assert worker_count(None, 10) == 3
    assert worker_count(8, 2) == 2  # never more workers than jobs
    assert worker_count(8, 1) == 1  # a single job compiles in-process
    assert worker_count(None, 3) == 1  # so do a few, unless workers are asked for
    assert worker_count(2, 3) == 2
    monkeypatch.setenv("EMBER_COMPILE_THREADS", "0")
    assert worker_count(None, 1000) >= 1
