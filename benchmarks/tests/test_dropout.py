"""Dropout statistics: eager against itself passes; no dropout, a shifted mean or NaN fail."""

from __future__ import annotations

import contextlib

import torch
from torch import nn

from benchmarks.dropout import Statistics, compare_statistics, sample


class Dropped(nn.Module):
    def __init__(self, rate: float) -> None:
        super().__init__()
        self.linear = nn.Linear(16, 16)
        self.dropout = nn.Dropout(rate)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.linear(x)).square().mean()


def _statistics(rate: float, scale: float = 1.0) -> Statistics:
    torch.manual_seed(0)
    module = Dropped(rate).train()
    x = torch.randn(64, 16)
    return sample(lambda x: module(x) * scale, module, (x,), contextlib.nullcontext)


def test_two_eager_runs_agree() -> None:
    first = _statistics(0.1)
    torch.manual_seed(1)
    assert compare_statistics(_statistics(0.1), first).passed


def test_a_backend_that_drops_dropout_fails() -> None:
    verdict = compare_statistics(_statistics(0.0), _statistics(0.5))
    assert not verdict.passed
    assert "masks not redrawn" in verdict.detail or "mean" in verdict.detail


def test_a_shifted_loss_fails() -> None:
    assert not compare_statistics(_statistics(0.1, scale=1.5), _statistics(0.1)).passed


def test_non_finite_fails() -> None:
    eager = _statistics(0.1)
    broken = Statistics((float("nan"),) * 4, eager.gradient_norms)
    assert not compare_statistics(broken, eager).passed
