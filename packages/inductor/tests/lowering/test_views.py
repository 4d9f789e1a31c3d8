"""View lowerings: reshapes of tensors with no elements index nothing (the backward of
linalg.svd reshapes [..., 0]-shaped pieces: unflatten divided by a zero stride)."""

from __future__ import annotations

import torch

import ember.prims as prims
from ember.inductor.pipeline import compile_graph


def test_reshape_of_an_empty_tensor() -> None:
    def fn(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return (x * 2).reshape(3, 0, 2), (x + 1).permute(2, 0, 1).reshape(-1, 2)

    x = torch.randn(2, 0, 3)
    compiled = compile_graph(prims.trace(fn, x), (x,))
    for got, expected in zip(compiled(x), fn(x)):
        assert got.shape == expected.shape


def test_as_strided_of_a_view_counts_its_offset_once() -> None:
    """aten's as_strided offset is absolute in the storage; prims::as_strided's counts from
    its argument's first element (the decomposition subtracts the argument's offset), and
    lowering subtracted it a second time (OpInfo as_strided.partial_views)."""
    base = torch.randn(15, generator=torch.Generator().manual_seed(0))
    view = base[5:]

    def fn(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return (
            torch.as_strided(x, (2, 2), (1, 2)),
            torch.as_strided(x, (2, 2), (1, 2), 0) * 2,
            torch.as_strided(x, (2, 2), (1, 2), 10) + 1,
        )

    compiled = compile_graph(prims.trace(fn, view), (view,))
    for got, expected in zip(compiled(view), fn(view)):
        torch.testing.assert_close(got, expected)
