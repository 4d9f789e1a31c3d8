"""Accuracy of a backend against eager, judged with a float64 reference.

Each compared value (inference: the output; training: the loss and the concatenated
parameter gradients of the first step) is scored by its relative L2 error against the same
computation run in float64 eager. A backend passes when, for every value,

    error(backend) <= MULTIPLIER * error(eager at the same dtype) + FLOOR[dtype]

so a compiler may differ from eager by rounding, but not be much less accurate than eager.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

MULTIPLIER = 3.0
FLOOR = {"float32": 1e-5, "bf16": 1e-3}


@dataclass(frozen=True)
class Comparison:
    """How one backend's values compare with the float64 reference and with eager."""

    passed: bool
    error: float  # the worst relative L2 error vs float64 over the compared values
    eager_error: float  # eager's error on that same value
    max_abs_vs_eager: float
    detail: str


def relative_error(value: torch.Tensor, reference: torch.Tensor) -> float:
    """||value - reference|| / ||reference|| in float64 (NaN when either is not finite)."""
    value64 = value.detach().double()
    reference64 = reference.detach().to(device=value.device, dtype=torch.float64)
    if value64.shape != reference64.shape:
        return math.inf
    if not (torch.isfinite(value64).all() and torch.isfinite(reference64).all()):
        return math.nan
    scale = reference64.norm().item()
    return (value64 - reference64).norm().item() / max(scale, 1e-30)


def compare(
    values: dict[str, torch.Tensor],
    eager: dict[str, torch.Tensor],
    reference: dict[str, torch.Tensor],
    dtype: str,
) -> Comparison:
    """Judges `values` (a backend's) against `reference` (float64), allowing eager's error."""
    passed, worst, worst_eager, max_abs, notes = True, 0.0, 0.0, 0.0, []
    for key, ref in reference.items():
        if key not in values:
            return Comparison(False, math.inf, math.nan, math.inf, f"{key}: missing")
        error = relative_error(values[key], ref)
        eager_error = relative_error(eager[key], ref)
        allowed = MULTIPLIER * eager_error + FLOOR[dtype]
        ok = error <= allowed  # False for NaN
        passed = passed and ok
        if not math.isnan(error) and error >= worst:
            worst, worst_eager = error, eager_error
        elif math.isnan(error):
            worst, worst_eager = math.nan, eager_error
        if values[key].shape == eager[key].shape:
            difference = values[key].detach().double() - eager[key].detach().double()
            max_abs = max(
                max_abs, float(difference.abs().max().item()) if difference.numel() else 0.0
            )
        notes.append(f"{key}: {error:.2e} (eager {eager_error:.2e}, allowed {allowed:.2e})")
    return Comparison(passed, worst, worst_eager, max_abs, "; ".join(notes))
