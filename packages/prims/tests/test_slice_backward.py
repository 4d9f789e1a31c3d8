"""`aten::slice_backward` decomposes to a pad (interior padding for a step) and matches eager,
static and over symbolic sizes (issue 17: Llama's rotary backward ran it as four fill-and-copy
kernels a layer)."""

from __future__ import annotations

import pytest
import torch

from ember.prims import run, trace
from ember.prims.decompositions import PRIM_DECOMPOSITIONS, decompose
from ember.prims.primitives import is_prim

aten = torch.ops.aten

CASES = [  # input sizes, dim, start, end, step
    ((4, 6, 8), 2, 4, 2**63 - 1, 1),  # rotate_half's second half
    ((4, 6, 8), 2, 0, 4, 1),  # and its first half
    ((4, 6, 8), -2, 1, 5, 1),
    ((4, 6, 8), 1, -4, -1, 1),
    ((4, 6, 8), 2, 1, 8, 3),
    ((4, 6, 8), 0, 0, 4, 2),
    ((4, 6, 8), 1, 3, 3, 1),  # empty slice
]


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
@pytest.mark.parametrize("case", CASES, ids=[str(c) for c in CASES])
def test_slice_backward_decomposes_and_matches_eager(
    case: tuple[tuple[int, ...], int, int, int, int], dynamic: bool
) -> None:
    sizes, dim, start, end, step = case
    shape = list(aten.slice.Tensor(torch.empty(sizes), dim, start, end, step).shape)
    grad = torch.randn(shape)

    def backward(grad: torch.Tensor) -> torch.Tensor:
        # the other dims' sizes from the gradient, symbolic in the dynamic trace as in a Graph
        full = [n if i != dim % len(sizes) else sizes[i] for i, n in enumerate(grad.shape)]
        return aten.slice_backward.default(grad, full, dim, start, end, step)

    graph = decompose(trace(backward, grad, dynamic=dynamic), PRIM_DECOMPOSITIONS)
    assert all(is_prim(node.target) for node in graph.nodes)
    torch.testing.assert_close(run(graph, grad), backward(grad))
