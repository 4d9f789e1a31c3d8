"""benchmarks/distributed.py: its CPU/gloo path with tiny sizes, and the overlap measure."""

from __future__ import annotations

import pytest

from benchmarks.distributed import interval_overlap, main


def test_interval_overlap_counts_communication_covered_by_compute() -> None:
    compute = [(0.0, 4.0), (3.0, 6.0), (10.0, 12.0)]  # merged: 0-6, 10-12
    assert interval_overlap([(5.0, 11.0)], compute) == pytest.approx(2 / 6, abs=1e-3)
    assert interval_overlap([(6.0, 10.0)], compute) == 0.0
    assert interval_overlap([(1.0, 2.0), (10.0, 11.0)], compute) == 1.0
    assert interval_overlap([], compute) is None


@pytest.mark.slow
def test_tiny_gloo_run_matches_eager_and_overlaps() -> None:
    rows = main(
        [
            "--device", "cpu", "--tiny", "--models", "gpt2", "--wrappers", "ddp,fsdp2",
            "--modes", "eager,ember", "--backend", "aot_eager", "--steps", "2", "--warmup", "1",
        ]
    )  # fmt: skip
    by_case = {(row["wrapper"], row["mode"]): row for row in rows}
    assert set(by_case) == {
        ("ddp", "eager"),
        ("ddp", "ember"),
        ("fsdp2", "eager"),
        ("fsdp2", "ember"),
    }
    for row in rows:
        assert row["error"] is None, row["error"]
        assert row["step_ms"] > 0
    for wrapper in ("ddp", "fsdp2"):
        assert by_case[wrapper, "ember"]["loss"] == pytest.approx(by_case[wrapper, "eager"]["loss"])
    ddp = by_case["ddp", "ember"]
    assert ddp["graphs"] > 2  # one Graph per DDP bucket (0.01 MB buckets in --tiny)
    early, total = (int(n) for n in ddp["early_allreduces"].split("/"))
    assert 0 < early < total
