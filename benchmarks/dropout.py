"""Training with dropout and stochastic depth on: a backend's statistics against eager's.

A compiled model draws its dropout masks from its own generator (inductor's Philox stream is
not eager's), so with dropout on no two backends see the same masks and values cannot be
compared one by one. Instead each runs SAMPLES training steps on the same weights and inputs
(forward, loss, backward; no optimizer step, so only the masks change) and the mean loss and
mean gradient norm must agree with eager's within SIGMAS standard errors of the difference
plus a relative floor. A backend whose loss does not change between steps while eager's does
has dropped dropout. Value-by-value accuracy is checked with dropout off (benchmarks/case.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

SAMPLES = 4
SIGMAS = 6.0  # two samples of 4: Student's t with 6 degrees of freedom beyond 6 is p < 0.001
RELATIVE_FLOOR = 0.02  # of eager's mean: bf16 rounding and cases where dropout barely moves it
STILL = 1e-3  # eager's loss varies by more than this (relative): the masks matter


@dataclass(frozen=True)
class Statistics:
    """Losses and gradient norms of SAMPLES steps with fresh masks each."""

    losses: tuple[float, ...]
    gradient_norms: tuple[float, ...]


@dataclass(frozen=True)
class DropoutComparison:
    passed: bool
    detail: str


def sample(
    run: Callable[..., Any],
    module: nn.Module,
    inputs: tuple[torch.Tensor, ...],
    autocast: Callable[[], AbstractContextManager[None]],
    samples: int = SAMPLES,
) -> Statistics:
    """SAMPLES forward-backward steps of `run` (a compiled or eager `module`) on fixed weights."""
    losses, norms = [], []
    for _ in range(samples):
        for parameter in module.parameters():
            parameter.grad = None
        with autocast():
            loss = run(*inputs)
        loss.backward()
        squares = sum(
            (
                p.grad.detach().double().square().sum()
                for p in module.parameters()
                if p.grad is not None
            ),
            torch.zeros((), dtype=torch.float64),
        )
        losses.append(float(loss.detach().double().item()))
        norms.append(math.sqrt(float(squares)))
    for parameter in module.parameters():
        parameter.grad = None
    return Statistics(tuple(losses), tuple(norms))


def _mean_and_variance(values: tuple[float, ...]) -> tuple[float, float]:
    mean = sum(values) / len(values)
    variance = sum((v - mean) ** 2 for v in values) / max(len(values) - 1, 1)
    return mean, variance


def _agree(name: str, backend: tuple[float, ...], eager: tuple[float, ...]) -> tuple[bool, str]:
    if not all(math.isfinite(v) for v in backend):
        return False, f"{name}: not finite {backend}"
    mean_b, var_b = _mean_and_variance(backend)
    mean_e, var_e = _mean_and_variance(eager)
    allowed = SIGMAS * math.sqrt((var_b + var_e) / len(backend)) + RELATIVE_FLOOR * abs(mean_e)
    ok = abs(mean_b - mean_e) <= allowed
    text = f"{name} mean {mean_b:.4g} vs eager {mean_e:.4g} (allowed ±{allowed:.2g})"
    if ok and math.sqrt(var_e) > STILL * abs(mean_e) and var_b == 0.0:
        return False, f"{name}: identical in every step while eager's varies (masks not redrawn)"
    return ok, text


def compare_statistics(backend: Statistics, eager: Statistics) -> DropoutComparison:
    """Whether `backend`'s dropout training steps are distributed like eager's."""
    loss_ok, loss_text = _agree("loss", backend.losses, eager.losses)
    norm_ok, norm_text = _agree("gradient norm", backend.gradient_norms, eager.gradient_norms)
    return DropoutComparison(loss_ok and norm_ok, f"dropout on: {loss_text}; {norm_text}")
