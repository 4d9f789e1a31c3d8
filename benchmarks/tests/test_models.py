"""Every available suite model builds at the small size and runs a step in both modes."""

from __future__ import annotations

import pytest
import torch

from benchmarks.models import SUITE, ModelSpec, build_workload, missing


@pytest.mark.parametrize("entry", SUITE, ids=[s.name for s in SUITE])
def test_small_model_runs(entry: ModelSpec) -> None:
    if reason := missing(entry):
        pytest.skip(reason)
    inference = build_workload(entry, "small", "inference")
    with torch.no_grad():
        assert inference.module(*inference.inputs).shape[0] == inference.inputs[0].shape[0]
    training = build_workload(entry, "small", "training")
    loss = training.module(*training.inputs)
    assert loss.dim() == 0
    loss.backward()


def test_builds_are_seeded() -> None:
    entry = SUITE[0]
    first, second = (build_workload(entry, "small", "inference") for _ in range(2))
    assert torch.equal(first.inputs[0], second.inputs[0])
    for a, b in zip(first.module.parameters(), second.module.parameters(), strict=True):
        assert torch.equal(a, b)
