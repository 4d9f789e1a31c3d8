"""Done-when of issue 22 on the CPU: each model of the 5-model suite (small sizes, random
weights) is exported in one process and loaded and run in another that imports neither
transformers nor the benchmark code, equal to eager; GPT-2 also through inductor and
through an ahead-of-time package loaded with Triton blocked and no C++ compiler."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("transformers")

from benchmarks.export_warm_start import SUITE, roundtrip  # noqa: E402


@pytest.fixture(autouse=True, scope="module")
def _shared_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("EMBER_CACHE_DIR", str(tmp_path_factory.mktemp("ember-cache")))
        yield


def _check(row: dict[str, Any], tolerance: float) -> None:
    assert "error" not in row, row["error"]
    assert row["foreign_modules"] in ([], ["triton"]), row["foreign_modules"]
    for run in row["rows"]:
        assert "error" not in run, (row["model"], run)
        scale = max(1.0, run["max_abs_expected"])
        assert run["max_abs_error"] <= tolerance * scale, (row["model"], run)


def test_suite_exports_and_runs_in_a_fresh_process() -> None:
    rows = roundtrip(list(SUITE), "small", "cpu", "eager", aot=False, timeout=900, together=True)
    assert [row["model"] for row in rows] == list(SUITE)
    for row in rows:
        _check(row, 1e-5)


def test_gpt2_export_compiles_with_inductor_in_a_fresh_process() -> None:
    (row,) = roundtrip(["hf_gpt2"], "small", "cpu", "inductor", aot=False, timeout=600)
    _check(row, 1e-5)
    assert row["rows"][0]["ran_as"] == "inductor"


def test_gpt2_aot_package_runs_without_compilers() -> None:
    (row,) = roundtrip(["hf_gpt2"], "small", "cpu", "aot", aot=True, timeout=600)
    _check(row, 1e-5)
    assert row["foreign_modules"] == []  # not even triton
    assert row["rows"][0]["ran_as"] == "aot"
