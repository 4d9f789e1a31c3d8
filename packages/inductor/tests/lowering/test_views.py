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
