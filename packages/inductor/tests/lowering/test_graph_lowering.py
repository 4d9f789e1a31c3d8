"""Lowering: what becomes lazy, what is realized, writes after reads, and fallbacks."""

from __future__ import annotations

import logging
from typing import Any

import pytest
import torch

import ember.prims as prims
from ember.inductor.ir.program import ExternNode, LoopNode
from ember.inductor.lowering.graph_lowering import lower_graph
from ember.inductor.pipeline import DECOMPOSITIONS, compile_graph
from ember.inductor.scheduler.fusion import Kernel, schedule
from ember.prims.decompositions import decompose
from ember.runtime import ArtifactCache


def _program(fn, *inputs):  # type: ignore[no-untyped-def]
    return lower_graph(decompose(prims.trace(fn, *inputs), DECOMPOSITIONS))


def test_pointwise_chain_is_one_loop_node() -> None:
    program = _program(lambda x: ((x * 2).exp() + 1).relu(), torch.randn(4, 4))
    assert [type(n) for n in program.nodes] == [LoopNode]


def test_a_read_before_a_write_is_computed_before_it() -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        before = x * 2  # lazy, reads x
        x.add_(1)
        return before + x

    program = _program(fn, torch.randn(3))
    stores = [n for n in program.nodes if isinstance(n, LoopNode)]
    # `before` is realized, then x is written, then the output reads both
    assert [n.storage == program.input_storages[0] for n in stores] == [False, True, False]


def test_ops_without_lowering_fall_back_with_a_perf_hint(caplog: pytest.LogCaptureFixture) -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        return torch.cumsum(x, 0) * 2

    with caplog.at_level(logging.INFO, logger="ember.inductor.perf_hints"):
        program = _program(fn, torch.randn(5))
    fallbacks = [n for n in program.nodes if isinstance(n, ExternNode) and n.is_fallback]
    assert [n.target for n in fallbacks] == ["prims::cumsum"]
    assert "test_graph_lowering.py" in caplog.text  # the user's line


def masked_softmax(scores: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Attention's masked, scaled scores read by a safe softmax's reductions and its final
    division: 17 ops, shared by four readers (BERT's sdpa math path)."""
    keys = torch.arange(scores.shape[-1])
    mask = keys[None, None, None, :] < lengths[:, None, None, None]
    bias = torch.zeros_like(mask, dtype=scores.dtype).masked_fill(~mask, float("-inf"))
    return torch.ops.aten._safe_softmax(scores * 0.125 + bias, -1)


def test_a_value_read_only_by_a_softmax_is_never_stored(tmp_path: Any) -> None:
    generator = torch.Generator().manual_seed(0)
    scores = torch.randn(2, 3, 16, 16, generator=generator)
    lengths = torch.tensor([16, 9])
    program = _program(masked_softmax, scores, lengths)
    wide = [n for n in program.nodes if isinstance(n, LoopNode) and n.ranges == (2, 3, 16, 16)]
    assert len(wide) == 1  # the output only; the masked scores stay in registers
    kernels = [k for k in schedule(program, "triton") if isinstance(k, Kernel)]
    assert len(kernels) == 1
    compiled = compile_graph(
        prims.trace(masked_softmax, scores, lengths),
        (scores, lengths),
        cache=ArtifactCache(tmp_path),
    )
    torch.testing.assert_close(compiled(scores, lengths), masked_softmax(scores, lengths))


def _normalized_sum_relu(*xs: torch.Tensor) -> torch.Tensor:
    # a residual block's tail: two normalized maps added (27 ops over 5 inputs), then a ReLU,
    # which reads the sum twice (`where(x <= 0, 0, x)`)
    a, b, scale, shift, other = xs
    total = (a - shift) * scale.rsqrt() * 2 + 1 + (b - other) * scale * 3 - shift.exp()
    return torch.relu(total)


def test_a_value_read_twice_by_one_relu_is_never_stored(tmp_path: Any) -> None:
    generator = torch.Generator().manual_seed(0)
    xs = [torch.randn(4, 8, 6, 6, generator=generator) for _ in range(2)]
    xs += [torch.rand(8, 1, 1, generator=generator) + 0.5 for _ in range(3)]
    program = _program(_normalized_sum_relu, *xs)
    wide = [n for n in program.nodes if isinstance(n, LoopNode) and n.ranges == (4, 8, 6, 6)]
    assert len(wide) == 1  # the ReLU's output only; the sum is computed inside it
    compiled = compile_graph(
        prims.trace(_normalized_sum_relu, *xs), xs, cache=ArtifactCache(tmp_path)
    )
    torch.testing.assert_close(compiled(*xs), _normalized_sum_relu(*xs))


def test_small_max_and_argmax_are_unrolled_pointwise() -> None:
    # 9 values a point, read across the contiguous dim (a channels-last pooling window): one
    # expression per output, not a 16-lane reduction tile; rows (a softmax's) stay reductions
    x = torch.randn(4, 9, 6)
    x[0, 3, 0] = float("nan")
    x[1, 2:5, 1] = 7.0  # ties: the first index wins

    def fn(t: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return t.amax(1), t.argmax(1), t.argmin(1), t.sum(1), t.amax(-1)

    program = _program(fn, x)
    loops = [n for n in program.nodes if isinstance(n, LoopNode)]
    assert sorted(bool(n.reduction_ranges) for n in loops) == [False, False, False, True, True]
    compiled = compile_graph(prims.trace(fn, x), (x,))
    for ours, theirs in zip(compiled(x), fn(x)):
        torch.testing.assert_close(ours, theirs, equal_nan=True)
