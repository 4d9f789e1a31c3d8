"""Lowering: what becomes lazy, what is realized, writes after reads, and fallbacks."""

from __future__ import annotations

import logging
import math
from typing import Any

import pytest
import torch

import ember.prims as prims
from ember.inductor.ir import body
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


def residual_gradients(*maps: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """A ResNet stage's backward: the residual gradient through three blocks (a ReLU mask and
    a branch gradient a link), each link read by its block's batch-norm sums and the next."""
    grad, branch3, out3, branch2, out2, branch1, out1 = maps
    relu_backward = torch.ops.aten.threshold_backward.default
    g3 = relu_backward(grad + branch3, out3, 0)
    g2 = relu_backward(g3 + branch2, out2, 0)
    g1 = relu_backward(g2 + branch1, out1, 0)
    return g2.sum((0, 2, 3)), (g2 * out2).sum((0, 2, 3)), g1 * 3, g1.sum((0, 2, 3))


def test_a_shared_value_loading_many_maps_is_stored_once(tmp_path: Any) -> None:
    """Two links of the chain load 5 maps; inlined, every reader loaded them all again (a
    kernel of ResNet-50's stage 1 loaded 7 maps of 51 MB). Stored, one node loads `grad`."""
    generator = torch.Generator().manual_seed(0)
    maps = [torch.randn(2, 4, 5, 5, generator=generator) for _ in range(7)]
    program = _program(residual_gradients, *maps)
    loading_grad = [n for n in program.nodes if isinstance(n, LoopNode) and "in0" in n.reads()]
    assert len(loading_grad) == 1
    compiled = compile_graph(
        prims.trace(residual_gradients, *maps), maps, cache=ArtifactCache(tmp_path)
    )
    for ours, theirs in zip(compiled(*maps), residual_gradients(*maps)):
        torch.testing.assert_close(ours, theirs)


def normalized_max_pool(x: torch.Tensor, scale: torch.Tensor) -> tuple[torch.Tensor, ...]:
    y = torch.relu((x - x.mean((0, 2, 3), keepdim=True)) * scale.rsqrt() * 2 + 1)
    return torch.ops.aten.max_pool2d_with_indices(y, [3, 3], [2, 2], [1, 1])


def test_overlapping_windows_are_never_stored(tmp_path: Any) -> None:
    """Max pooling's windows (a 3x3 window per output, stride 2) of a normalized map are read
    by its amax and its argmax. Stored, they took 2.25x the map's memory (ResNet-50's stem:
    116 MB written and read back for a 51 MB map); inlined, each reader loads the map."""
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(2, 4, 12, 12, generator=generator)
    scale = torch.rand(1, 4, 1, 1, generator=generator) + 0.5
    program = _program(normalized_max_pool, x, scale)
    largest = max(
        math.prod(int(size) for size in node.ranges)
        for node in program.nodes
        if isinstance(node, LoopNode)
    )
    assert largest <= x.numel()
    compiled = compile_graph(
        prims.trace(normalized_max_pool, x, scale), (x, scale), cache=ArtifactCache(tmp_path)
    )
    for ours, theirs in zip(compiled(x, scale), normalized_max_pool(x, scale)):
        torch.testing.assert_close(ours, theirs)


def gradient_statistics(*maps: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """A residual stage's input gradient (bf16: the branch gradients summed through a ReLU
    mask), upcast once and read by two batch-norm backwards: their sums and gradients."""
    *branches, mask, x = maps
    total = branches[0] + branches[1] + branches[2] + branches[3]
    grad = torch.ops.aten.threshold_backward.default(total, mask, 0).float()
    return grad.sum((0, 2)), (grad * x).sum((0, 2)), grad * x - grad.mean(), (grad * 2).sum(0)


def test_a_shared_float32_upcast_stores_the_bfloat16_value() -> None:
    """ResNet-50's backward stored the float32 upcast of each stage's input gradient, read by
    the two batch norms of the block: 103 MB where the bf16 gradient takes 51 MB. The 16-bit
    value is stored; the exact upcast stays in its readers (values: the Triton interpreter
    case `shared_bfloat16_upcast` in codegen/test_triton.py)."""
    from ember.inductor.codegen.triton import TritonBackend

    generator = torch.Generator().manual_seed(0)
    maps = [torch.randn(6, 5, 4, generator=generator).bfloat16() for _ in range(5)]
    maps.append(torch.randn(6, 5, 4, generator=generator))
    graph = decompose(prims.trace(gradient_statistics, *maps), DECOMPOSITIONS)
    dtypes = TritonBackend().dtypes
    program = lower_graph(graph, dtypes, dtypes)
    whole = [n for n in program.nodes if isinstance(n, LoopNode) and n.ranges == (6, 5, 4)]
    stored = sorted(str(program.storages[n.storage].dtype) for n in whole)
    assert stored == ["torch.bfloat16", "torch.float32"], stored  # the gradient, the output


def batch_norm_max_pool(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """ResNet's stem in training: batch statistics, ReLU, a 3x3 max pool of stride 2."""
    var, mean = torch.var_mean(x, (0, 2, 3), correction=0, keepdim=True)
    y = torch.relu((x - mean) * torch.rsqrt(var + 1e-5))
    return torch.ops.aten.max_pool2d_with_indices(y, [3, 3], [2, 2], [1, 1])


def test_a_per_channel_scale_is_stored_once_for_its_pooling_windows(tmp_path: Any) -> None:
    """Inlined into the pooling windows, the batch norm's scale (a variance from the sums, a
    division, a square root) was computed for each of the 9 window elements of every output
    (0.78 ms of ResNet's training step); stored once a channel, the windows load it."""
    x = torch.randn(2, 4, 12, 12, generator=torch.Generator().manual_seed(0))
    program = _program(batch_norm_max_pool, x)
    square_roots = {
        math.prod(int(size) for size in node.ranges)
        for node in program.nodes
        if isinstance(node, LoopNode)
        for value in body.walk(node.body)
        if value.op in ("rsqrt", "sqrt")
    }
    assert square_roots == {4}
    compiled = compile_graph(
        prims.trace(batch_norm_max_pool, x), (x,), cache=ArtifactCache(tmp_path)
    )
    for ours, theirs in zip(compiled(x), batch_norm_max_pool(x)):
        torch.testing.assert_close(ours, theirs)
