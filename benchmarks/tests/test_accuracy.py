"""The accuracy rule: a backend may be up to 3x less accurate than eager, plus a floor."""

from __future__ import annotations

import math

import torch

from benchmarks.accuracy import FLOOR, compare, relative_error


def test_relative_error_is_scale_free() -> None:
    reference = torch.tensor([1.0, 2.0, 2.0], dtype=torch.float64)
    assert math.isclose(relative_error(reference * 1.01, reference), 0.01, rel_tol=1e-9)
    assert math.isclose(relative_error(reference * 1000 * 1.01, reference * 1000), 0.01)


def test_non_finite_values_fail() -> None:
    reference = {"output": torch.ones(4, dtype=torch.float64)}
    eager = {"output": torch.ones(4)}
    broken = {"output": torch.tensor([1.0, math.nan, 1.0, 1.0])}
    assert not compare(broken, eager, reference, "float32").passed


def test_backend_as_accurate_as_eager_passes_and_much_worse_fails() -> None:
    torch.manual_seed(0)
    reference = {"output": torch.randn(1000, dtype=torch.float64)}
    eager = {"output": reference["output"].float()}
    same = {"output": reference["output"].float()}
    assert compare(same, eager, reference, "float32").passed
    worse = {"output": (reference["output"] * (1 + 10 * FLOOR["float32"])).float()}
    result = compare(worse, eager, reference, "float32")
    assert not result.passed
    assert "output" in result.detail


def test_shape_mismatch_fails() -> None:
    reference = {"output": torch.ones(4, dtype=torch.float64)}
    result = compare({"output": torch.ones(5)}, {"output": torch.ones(4)}, reference, "float32")
    assert not result.passed
