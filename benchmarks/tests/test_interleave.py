"""`benchmarks.run --interleave`: a backend's steps are timed in turn with eager's (and the
group's earlier backends'), round by round in one worker, and its speedup is taken from those
rounds. Timed one case after another, a load change on a shared host between eager's case and
a compiled one's moved single speedups by up to 2x (hf_convnext inference 0.59x in a
sequential run, 1.27x interleaved, docs/perf/cpu-kernels.md)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from benchmarks.case import Settings
from benchmarks.device_lock import MeasurementLock
from benchmarks.timing import interleaved_medians
from benchmarks.worker import Worker


def test_interleaved_medians_time_the_steps_in_turn() -> None:
    calls: list[str] = []

    def step(name: str) -> Callable[[], object]:
        return lambda: calls.append(name)

    steps = {name: step(name) for name in ("eager", "a", "b")}
    medians, rounds = interleaved_medians(steps, torch.device("cpu"), 4, 60.0)
    assert rounds == 4
    assert calls == ["eager", "a", "b"] * 4
    assert set(medians) == {"eager", "a", "b"}


def test_an_interleaved_worker_relates_a_backend_to_eager_of_the_same_rounds(
    tmp_path: Path,
) -> None:
    settings = Settings(steps=5, warmup=1, timing_allowance_s=30.0, warm_compile=False)
    worker = Worker(torch.device("cpu"), settings, MeasurementLock(tmp_path / "lock"), True)
    case = {"model": "mlp", "size": "small", "mode": "inference", "dtype": "float32"}
    eager = worker.run({**case, "backend": "eager"})
    assert eager["status"] == "pass", eager
    ours = worker.run({**case, "backend": "ember:inductor"})
    assert ours["status"] == "pass", ours
    assert set(ours["interleaved_ms"]) == {"eager"}
    assert ours["eager_median_ms"] == ours["interleaved_ms"]["eager"]
    assert ours["speedup"] == pytest.approx(ours["eager_median_ms"] / ours["median_ms"])
    assert worker.partners is not None and set(worker.partners) == {"eager", "ember:inductor"}
    # the next group starts from its own eager step; the compiled one is let go
    assert worker.run({**case, "mode": "training", "backend": "eager"})["status"] == "pass"
    assert set(worker.partners) == {"eager"}
