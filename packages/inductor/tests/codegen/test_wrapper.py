"""The Python wrapper: literal arguments of extern calls are spelled as Python values (a
complex scalar: polar's backward multiplies by 1j)."""

from __future__ import annotations

import torch

import ember


def test_a_complex_literal_reaches_an_extern_call() -> None:
    radius = torch.rand(5, requires_grad=True)
    angle = torch.randn(5, requires_grad=True)
    compiled = ember.compile(lambda r, a: torch.polar(r, a), backend="inductor")
    torch.testing.assert_close(compiled(radius, angle), torch.polar(radius, angle))
