"""A reduction over a symbolic length whose range the Graph bounds (attention over a prompt
length that slices a causal mask) is persistent over tiles of the bound, and masked to the
length at run time (issue 19: planned as 8192, a softmax over 256 keys looped one row a
program, 25 times a static kernel's time on the H100)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from ember import prims
from ember.inductor.codegen.triton import TritonBackend
from ember.inductor.codegen.triton.heuristics import choose_tiling, reduces
from ember.inductor.lowering.graph_lowering import lower_graph
from ember.inductor.pipeline import DECOMPOSITIONS, _size_ranges, compile_graph
from ember.inductor.scheduler.fusion import Kernel, schedule
from ember.prims.decompositions import decompose
from ember.runtime import ArtifactCache

CONTEXT = 32
KEEP = torch.rand(CONTEXT, generator=torch.Generator().manual_seed(0)) > 0.3
KEEP[0] = True


def masked_softmax(scores: torch.Tensor) -> torch.Tensor:
    """Scores of shape (length, heads): each head's softmax over the length, the positions
    KEEP drops masked out (the traced symbol is dim 0; slicing KEEP bounds it by 32)."""
    length = scores.shape[0]
    rows = scores.t().masked_fill(~KEEP[:length], float("-inf"))
    return torch.softmax(rows, dim=-1)


def _graph(length: int) -> prims.Graph:
    return prims.trace(masked_softmax, torch.randn(length, 3), dynamic=True)


def test_a_bounded_symbolic_row_reduction_is_persistent_over_its_bound() -> None:
    graph = decompose(_graph(8), DECOMPOSITIONS)
    assert graph.symbols, "traced with a symbolic length"
    program = lower_graph(graph)
    program.size_ranges = _size_ranges(graph)  # as the pipeline sets them
    assert any(high == CONTEXT for _, high in program.size_ranges.values()), program.size_ranges
    kernels = [k for k in schedule(program, "triton") if isinstance(k, Kernel) and reduces(k)]
    assert kernels
    for kernel in kernels:
        tiling = choose_tiling(kernel, program)
        assert tiling.persistent, tiling
        assert tiling.configs[0].rblock == CONTEXT and tiling.configs[0].xblock > 1, tiling


@pytest.mark.parametrize("length", [5, 17, CONTEXT])
def test_the_bounded_persistent_kernel_matches_eager_at_each_length(
    length: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("triton")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    graph = _graph(8)
    compiled = compile_graph(graph, (torch.randn(8, 3),), backend=TritonBackend(),
                             cache=ArtifactCache(tmp_path))  # fmt: skip
    scores = torch.randn(length, 3, generator=torch.Generator().manual_seed(length))
    torch.testing.assert_close(compiled(scores), masked_softmax(scores))
