"""Two different kernels under one name raise instead of one replacing the other (the wrapper
would launch the survivor twice and never the other: ResNet-50's adjacent convolution
templates did before ed5bbdc)."""

from __future__ import annotations

from typing import Any

import pytest
import torch

import ember.inductor.pipeline as pipeline
import ember.prims as prims
from ember.inductor.errors import InductorError
from ember.inductor.scheduler.fusion import Kernel


def _two_kernels(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return x.sin() * 2, (x.cos() + 1).sum(0)


def test_two_different_kernels_of_one_name_raise(monkeypatch: pytest.MonkeyPatch) -> None:
    real = pipeline._schedule

    def one_name(*args: Any) -> Any:
        scheduled = real(*args)
        kernels = [item for item in scheduled if isinstance(item, Kernel)]
        assert len(kernels) >= 2
        kernels[1].name = kernels[0].name
        return scheduled

    x = torch.randn(8, 8)
    graph = prims.trace(_two_kernels, x)
    monkeypatch.setattr(pipeline, "_schedule", one_name)
    with pytest.raises(InductorError, match="both named"):
        pipeline.compile_graph(graph, (x,))
