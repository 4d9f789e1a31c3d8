"""Which reductions split in two (few outputs over many elements), and how."""

from __future__ import annotations

from collections.abc import Callable

import sympy
import torch

from ember import prims
from ember.inductor.codegen.triton.heuristics import choose_tiling
from ember.inductor.ir.indexing import product
from ember.inductor.ir.program import LoopNode
from ember.inductor.lowering.graph_lowering import lower_graph
from ember.inductor.lowering.split_reduction import plan_split
from ember.inductor.pipeline import DECOMPOSITIONS
from ember.inductor.scheduler.fusion import Kernel, schedule
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


def test_a_column_reduction_splits_its_rows_into_chunk_major_partials() -> None:
    """Llama's RMSNorm weight gradient: 1024 outputs over 8192 tokens, read along the
    outputs. Unsplit, 64 outputs a program make 16 programs (0.24 ms on the H100)."""
    split = plan_split(_ints(1024), _ints(8192), "sum", column=True)
    assert split is not None and split.chunk_major
    chunks = 1
    for size in split.outer:
        chunks *= int(size)
    assert chunks * (1024 // 64) >= 512
    assert int(split.inner[0]) * chunks == 8192 and int(split.inner[0]) >= 64
    # batch and sequence dims: the batch dim whole, then a cut of the sequence dim
    split = plan_split(_ints(1024), _ints(8, 1024), "sum", column=True)
    assert split is not None and split.lead == 1 and split.cut > 1
    assert split.outer[0] == 8 and split.inner[0] * split.cut == 1024
    b, c, r = sympy.symbols("b c r")
    assert split.index([b, c], [r]) == [b, c * split.inner[0] + r]


def test_small_or_wide_column_reductions_stay_whole() -> None:
    assert plan_split(_ints(40), _ints(1500), "sum", column=True) is None  # small
    assert plan_split(_ints(65536), _ints(64), "sum", column=True) is None  # many programs
    assert plan_split(_ints(1024), _ints(8192), "argmax", column=True) is None


def _reduction_nodes(fn: Callable[..., torch.Tensor], *inputs: torch.Tensor) -> list[LoopNode]:
    graph = decompose(prims.trace(fn, *inputs), DECOMPOSITIONS)
    program = lower_graph(graph, split_reductions=True)
    return [n for n in program.nodes if isinstance(n, LoopNode) and n.reduction_type]


def test_lowering_tells_column_reductions_from_row_reductions() -> None:
    x = torch.randn(8192, 128)
    partial, final = _reduction_nodes(lambda t: t.sum(0), x)
    assert partial.ranges[-1] == 128 and final.ranges == (128,)  # outputs innermost
    assert final.reduction_ranges == partial.ranges[:-1]
    (whole,) = _reduction_nodes(lambda t: t.sum(1), x)  # a row sum: 8192 programs already
    assert whole.ranges == (8192,)


def test_a_split_column_reduction_runs_as_many_programs_as_its_chunks() -> None:
    x = torch.randn(8192, 1024)
    graph = decompose(prims.trace(lambda t: t.sum(0), x), DECOMPOSITIONS)
    program = lower_graph(graph, split_reductions=True)
    kernels = [k for k in schedule(program, "triton") if isinstance(k, Kernel)]
    programs = []
    for kernel in kernels:
        tiling = choose_tiling(kernel, program)
        xblock = tiling.configs[0].xblock
        programs.append(-(-int(product(kernel.outer)) // xblock))
    assert max(programs) >= 512, programs


def test_a_column_sum_over_a_view_of_a_computed_value_splits() -> None:
    """GPT-2's bias gradients: a sum over a [4096, 768] view of a pointwise value computed
    over [8, 512, 768]. The view leaves divisions and remainders in the loads' index, which
    read as neither a row nor a column reduction: the sum ran whole, 12 programs of 4096 rows
    (45 us each, 25 a step on the H100)."""

    def bias_gradient(g: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        return (g * h).view(4096, 768).sum(0)

    x = torch.randn(8, 512, 768)
    graph = decompose(prims.trace(bias_gradient, x, x), DECOMPOSITIONS)
    reductions = [
        n
        for n in lower_graph(graph, split_reductions=True).nodes
        if isinstance(n, LoopNode) and n.reduction_type
    ]
    assert len(reductions) == 2
    assert reductions[0].ranges == tuple(_ints(64, 768))  # chunk-major partials


def test_the_last_stage_batch_norm_sums_split() -> None:
    """ResNet-50's last stage: 512 channels over 32 x 7 x 7 rows, read along the channels.
    Whole, 8 programs of 64 channels stepped through 49 row blocks (27 us on the H100)."""
    split = plan_split(_ints(512), _ints(32, 7, 7), "sum", column=True)
    assert split is not None and split.chunk_major
    assert product(split.outer) * 512 // 64 >= 64
