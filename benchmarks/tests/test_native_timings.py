"""The default-mode suite's split of the native wrapper's host time (`_native_timings`): run
on the CPU with the interpreter on for CPU graphs, as the GPU rows run it by default."""

from __future__ import annotations

import pytest
import torch

import ember
from benchmarks import cudagraph_overhead
from benchmarks.cudagraph_suite import _native_timings


def test_the_programs_time_is_split_by_kind_of_instruction(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(cudagraph_overhead, "DEVICE", torch.device("cpu"))  # no GPU to sync

    def fn(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return torch.relu(x @ w).sum(0)

    compiled = ember.compile(fn, options={"native_wrapper": "always"})
    x, w = torch.randn(8, 4), torch.randn(4, 3)

    def step() -> None:
        torch.testing.assert_close(compiled(x, w), fn(x, w))

    for _ in range(5):  # compiles, then capture's early calls time it against eager
        step()
    lines = _native_timings(step, 3)
    assert lines and "ms/step in" in lines[0]  # other tests' programs may be alive, idle
    kinds = [line.split("us  ")[-1] for line in lines[1:]]
    assert "extern aten::mm" in kinds and "launch python" in kinds
    counts = {line.split("us  ")[-1]: float(line.split()[2].rstrip("x")) for line in lines[1:]}
    assert counts["extern aten::mm"] == 1.0  # once a step
