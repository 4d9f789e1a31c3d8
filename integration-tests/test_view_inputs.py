"""View inputs through every backend: a compiled function given slices of one storage at
several offsets equals eager, also where the Graph reads the storage offset (as_strided)."""

from __future__ import annotations

import pytest
import torch

import ember


def strided_window(x: torch.Tensor) -> torch.Tensor:
    # as_strided's offset counts from the start of x's storage, not from x's first element.
    return torch.as_strided(x, (2, 2), (1, 2), 1) * 2


def shifted_sum(x: torch.Tensor) -> torch.Tensor:
    return x[1:] + x[:-1]


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
@pytest.mark.parametrize("fn", [strided_window, shifted_sum], ids=lambda fn: fn.__name__)
def test_slices_at_several_offsets_equal_eager(backend: str, fn) -> None:
    base = torch.arange(20.0)
    compiled = ember.compile(fn, backend=backend)
    for start in (2, 5, 0, 7):
        view = base[start : start + 10]
        torch.testing.assert_close(compiled(view), fn(view), rtol=0, atol=0)
