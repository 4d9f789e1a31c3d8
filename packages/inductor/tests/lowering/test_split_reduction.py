"""Which reductions split in two (few outputs over many elements), and how."""

from __future__ import annotations

import sympy
import torch

from ember import prims
from ember.inductor.lowering.graph_lowering import lower_graph
from ember.inductor.lowering.split_reduction import plan_split
from ember.inductor.pipeline import DECOMPOSITIONS
from ember.prims.decompositions import decompose


def _ints(*sizes: int) -> list[sympy.Integer]:
    return [sympy.Integer(s) for s in sizes]


def test_batch_norm_backward_splits_on_the_batch_dim() -> None:
    split = plan_split(_ints(64), _ints(32, 112, 112), "sum")
    assert split is not None
    assert split.outer == tuple(_ints(32)) and split.inner == tuple(_ints(112, 112))


def test_one_long_dim_is_cut_into_equal_chunks() -> None:
    split = plan_split(_ints(2), _ints(32768), "max")
    assert split is not None and split.lead == 0
    (splits,), (chunk,) = split.outer, split.inner
    assert splits * chunk == 32768 and chunk >= 1024
    x0, r0 = sympy.symbols("x0 r0")
    assert split.index([x0], [r0]) == [x0 * chunk + r0]


def test_reductions_that_already_fill_the_gpu_or_cannot_combine_stay_whole() -> None:
    assert plan_split(_ints(4096), _ints(4096), "sum") is None  # many outputs
    assert plan_split(_ints(64), _ints(512), "sum") is None  # short rows
    assert plan_split(_ints(64), _ints(32, 112, 112), "argmax") is None
    assert plan_split(_ints(3), _ints(32771), "sum") is None  # a prime length: no equal cut
    assert plan_split([sympy.Symbol("s0")], _ints(32, 112, 112), "sum") is None


def test_lowering_makes_a_partial_and_a_final_reduction() -> None:
    def channel_sums(x: torch.Tensor) -> torch.Tensor:
        return x.sum((0, 2, 3))

    graph = decompose(prims.trace(channel_sums, torch.randn(8, 3, 64, 64)), DECOMPOSITIONS)
    whole = [n for n in lower_graph(graph).nodes if getattr(n, "reduction_type", None)]
    split = [
        n
        for n in lower_graph(graph, split_reductions=True).nodes
        if getattr(n, "reduction_type", None)
    ]
    assert len(whole) == 1 and len(split) == 2
    assert split[0].ranges == tuple(_ints(3, 8)) and split[1].reduction_ranges == tuple(_ints(8))
