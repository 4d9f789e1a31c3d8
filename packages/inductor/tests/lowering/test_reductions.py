"""Reduction lowerings: the variance in one pass over its input (the shifted sums), with
eager's values where the data sit far from zero and on constant slices."""

from __future__ import annotations

from typing import Any

import torch

import ember.prims as prims
from ember.inductor.ir.program import LoopNode
from ember.inductor.lowering.graph_lowering import lower_graph
from ember.inductor.pipeline import DECOMPOSITIONS, compile_graph
from ember.inductor.scheduler.fusion import Kernel, schedule
from ember.prims.decompositions import decompose
from ember.runtime import ArtifactCache


def channel_statistics(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Batch norm's statistics: the mean and the biased variance of each channel."""
    return x.mean((0, 2, 3)), x.var((0, 2, 3), correction=0)


def test_variance_reads_its_input_in_one_kernel() -> None:
    """Two passes (the mean, then the squared deviations) read a ResNet-50 convolution's
    output twice for its batch norm (the second pass reads the first's result, so split on a
    GPU they are separate kernels); both sums of the shifted form share one kernel."""
    x = torch.randn(32, 16, 64, 64)
    graph = decompose(prims.trace(channel_statistics, x), DECOMPOSITIONS)
    program = lower_graph(graph, split_reductions=True)
    kernels = [k for k in schedule(program, "triton") if isinstance(k, Kernel)]
    readers = [k for k in kernels if any("in0" in m.node.reads() for m in k.members)]
    assert len(readers) == 1
    assert all(isinstance(n, LoopNode) for n in program.nodes)


def test_variance_equals_eager_far_from_zero_and_on_constant_slices(tmp_path: Any) -> None:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(4, 6, 7, 5, generator=generator) * 1e-2 + 1e3  # mean >> spread
    x[:, 2] = 3.25  # a constant channel: exactly zero, never a rounding's negative value

    def fn(t: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return (
            t.var((0, 2, 3), correction=0),
            t.var(1),
            t.var((1, 3), correction=2, keepdim=True),
        )

    compiled = compile_graph(prims.trace(fn, x), (x,), cache=ArtifactCache(tmp_path))
    exact = fn(x.double())
    for ours, theirs, eager in zip(compiled(x), exact, fn(x)):
        # as close to the float64 answer as eager's float32 two-pass kernel, up to a rounding
        # of the result itself
        error = (ours.double() - theirs).abs().max()
        rounding = 2 * torch.finfo(torch.float32).eps * theirs.abs().max()
        assert error <= 2 * (eager.double() - theirs).abs().max() + rounding
    assert torch.equal(compiled(x)[0][2], torch.tensor(0.0))
