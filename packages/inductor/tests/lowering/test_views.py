"""View lowerings: reshapes of tensors with no elements index nothing (the backward of
linalg.svd reshapes [..., 0]-shaped pieces: unflatten divided by a zero stride); a view of a
lazy value realized for a matmul shares its base's buffer."""

from __future__ import annotations

from typing import Any

import torch

import ember.prims as prims
from ember.inductor.ir.program import ExternNode, LoopNode
from ember.inductor.lowering.graph_lowering import lower_graph
from ember.inductor.pipeline import DECOMPOSITIONS, compile_graph
from ember.prims.decompositions import decompose


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


def linear_backward(g: torch.Tensor, y: torch.Tensor, w: torch.Tensor, x: torch.Tensor) -> Any:
    """A gradient computed once and read by two matmuls, the first through its transpose
    (a Linear's weight and input gradients)."""
    grad = g * torch.sigmoid(y)
    return grad.t() @ x, grad @ w


def test_a_transposed_matmul_argument_shares_its_base_buffer() -> None:
    generator = torch.Generator().manual_seed(0)
    g, y = torch.randn(32, 24, generator=generator), torch.randn(32, 24, generator=generator)
    w, x = torch.randn(24, 8, generator=generator), torch.randn(32, 16, generator=generator)
    graph = decompose(prims.trace(linear_backward, g, y, w, x), DECOMPOSITIONS)
    program = lower_graph(graph)
    loops = [n for n in program.nodes if isinstance(n, LoopNode)]
    assert len(loops) == 1  # the gradient, stored once; the transpose is a strided view of it
    for extern in (n for n in program.nodes if isinstance(n, ExternNode)):
        assert loops[0].storage in extern.reads()
    compiled = compile_graph(prims.trace(linear_backward, g, y, w, x), (g, y, w, x))
    for got, expected in zip(compiled(g, y, w, x), linear_backward(g, y, w, x)):
        torch.testing.assert_close(got, expected)
