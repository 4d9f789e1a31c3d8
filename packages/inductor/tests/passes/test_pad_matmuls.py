"""Padding misaligned matmuls: the padded Graph computes what eager does, its products have
aligned leading dimensions, and aligned or small products are left alone."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

import ember.prims as prims
from ember.inductor import pipeline
from ember.inductor.config import InductorConfig
from ember.inductor.ir.program import LoopNode
from ember.inductor.lowering.graph_lowering import lower_graph
from ember.inductor.passes.pad_matmuls import pad_matmuls
from ember.inductor.pipeline import DECOMPOSITIONS
from ember.prims import TensorSpec
from ember.prims.config import load
from ember.prims.decompositions import decompose
from ember.runtime import ArtifactCache

# On the CPU, in float32 (4 floats make 16 bytes), with no size threshold.
ON_CPU: dict[str, Any] = {"devices": ("cpu",), "dtypes": (torch.float32,), "min_flops": 0}


def lm_head(hidden: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    # N = vocabulary, misaligned; the 3-D product is view -> mm -> view, and the last view
    # must follow the padded row stride (GPT-2's logits were garbage when it did not)
    return torch.relu(hidden @ weight.t()) + 1


def lm_head_output(hidden: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    return hidden @ weight.t()  # the viewed padded product is the graph's output


def classifier(hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.linear(hidden, weight, bias)  # addmm: the bias is padded too


def weight_gradient(grad: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
    return grad.t() @ hidden  # a transposed (column-major) operand: M and K misaligned


def aligned(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return x @ w


CASES: list[tuple[Callable[..., torch.Tensor], list[tuple[int, ...]]]] = [
    (lm_head, [(6, 12), (37, 12)]),
    (lm_head, [(2, 3, 12), (37, 12)]),
    (lm_head_output, [(2, 3, 12), (37, 12)]),
    (weight_gradient, [(10, 37), (10, 9)]),
    (classifier, [(6, 12), (37, 12), (37,)]),
]


def _graph(fn: Callable[..., torch.Tensor], inputs: list[torch.Tensor]) -> prims.Graph:
    return decompose(prims.trace(fn, *inputs), DECOMPOSITIONS)  # mm stays an extern op


def _inputs(shapes: list[tuple[int, ...]]) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    return [torch.randn(*shape, generator=generator) for shape in shapes]


def _mm_specs(graph: prims.Graph) -> list[list[TensorSpec]]:
    values = graph.values()
    found = []
    for node in graph.nodes:
        if node.target in ("aten::mm.default", "aten::addmm.default"):
            operands = [values[a.name].spec for a in node.args[-2:]]  # addmm: past the bias
            specs = [*operands, node.outputs[0].spec]
            found.append([s for s in specs if isinstance(s, TensorSpec)])
    return found


@pytest.mark.parametrize(("fn", "shapes"), CASES)
def test_padded_products_are_aligned_and_equal_eager(
    fn: Callable[..., torch.Tensor], shapes: list[tuple[int, ...]], tmp_path: Path
) -> None:
    inputs = _inputs(shapes)
    graph = _graph(fn, inputs)
    padded = pad_matmuls(graph, **ON_CPU)
    (specs,) = _mm_specs(padded)
    for spec in specs:  # every leading dimension is a multiple of 4 floats
        leading = spec.strides[0] if spec.strides[1] == 1 else spec.strides[1]
        assert leading % 4 == 0, spec
    assert any(node.target == "prims::pad" for node in padded.nodes)
    expected = fn(*inputs)
    torch.testing.assert_close(prims.run(padded, *inputs), expected)


@pytest.mark.parametrize(("fn", "shapes"), CASES)
def test_compiled_with_padding_equals_eager(
    fn: Callable[..., torch.Tensor],
    shapes: list[tuple[int, ...]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    inputs = _inputs(shapes)
    monkeypatch.setattr(pipeline, "pad_matmuls", functools.partial(pad_matmuls, **ON_CPU))
    for padded_outputs in (False, True):
        config = dataclasses.replace(
            load(InductorConfig), cache=False, padded_outputs=padded_outputs
        )
        compiled = pipeline.compile_graph(
            prims.trace(fn, *inputs), inputs, config=config, cache=ArtifactCache(tmp_path)
        )
        assert "prims::pad" not in compiled.source  # pads are kernels, not fallbacks
        wrapper_mm = [line for line in compiled.source.splitlines() if "mm.default" in line]
        assert wrapper_mm and "buf" in wrapper_mm[0]  # the product reads a padded buffer
        result, expected = compiled(*inputs), fn(*inputs)
        if not padded_outputs or fn is lm_head:
            assert result.stride() == expected.stride()  # outputs keep eager's strides
        else:  # the output is the padded product's view: rows keep a 16-byte multiple stride
            assert result.stride()[-1] == 1
            assert all(s * result.element_size() % 16 == 0 for s in result.stride()[:-1])
        torch.testing.assert_close(result, expected, rtol=1e-5, atol=1e-5)


def test_aligned_small_and_cpu_products_are_left_alone() -> None:
    inputs = _inputs([(6, 12), (12, 16)])
    assert _mm_specs(pad_matmuls(_graph(aligned, inputs), **ON_CPU)) == _mm_specs(
        _graph(aligned, inputs)
    )
    misaligned = _graph(lm_head, _inputs([(6, 12), (37, 12)]))
    for options in ({}, {**ON_CPU, "min_flops": 1 << 30}):  # a CPU graph; a small product
        kept = pad_matmuls(misaligned, **options)
        assert not any(node.target == "prims::pad" for node in kept.nodes)


def lm_head_backward(
    logits: torch.Tensor, weight: torch.Tensor, hidden: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """A vocabulary-wide gradient read by the input gradient's matmul and, transposed, by the
    weight gradient's: K of the one and M of the other are the misaligned vocabulary."""
    grad = torch.relu(logits) * 2
    return grad @ weight, grad.t() @ hidden


def test_a_value_and_its_transpose_share_one_padded_buffer(tmp_path: Path) -> None:
    inputs = _inputs([(10, 37), (37, 12), (10, 9)])
    padded = pipeline.eliminate_common_subexpressions(
        pad_matmuls(_graph(lm_head_backward, inputs), **ON_CPU)
    )
    pads = [node for node in padded.nodes if node.target == "prims::pad"]
    padded_inputs = {node.args[0].name for node in pads}
    assert len(pads) == len(padded_inputs)  # the gradient is padded once
    program = lower_graph(padded)
    gradients = [
        node
        for node in program.nodes
        if isinstance(node, LoopNode) and tuple(node.ranges) in ((10, 40), (40, 10))
    ]
    assert len(gradients) == 1
    for got, expected in zip(prims.run(padded, *inputs), lm_head_backward(*inputs)):
        torch.testing.assert_close(got, expected)


# Products whose rows are a symbolic size (a decoder's batch times its prompt length, issue
# 19): the weight is a constant, so N and K stay static and are padded; M is never padded.
VOCABULARY = torch.randn(37, 12, generator=torch.Generator().manual_seed(1))
VOCABULARY_BIAS = torch.randn(37, generator=torch.Generator().manual_seed(2))
SYMBOLIC_CASES: list[tuple[Callable[..., torch.Tensor], tuple[int, ...]]] = [
    (lambda h: h @ VOCABULARY.t(), (6, 12)),  # the padded product's view is the output
    (lambda h: torch.relu(h @ VOCABULARY.t()) + 1, (6, 12)),
    (lambda h: torch.nn.functional.linear(h, VOCABULARY, VOCABULARY_BIAS), (6, 5, 12)),
]


@pytest.mark.parametrize(("fn", "shape"), SYMBOLIC_CASES)
def test_a_symbolic_row_count_keeps_its_rows_and_pads_the_columns(
    fn: Callable[..., torch.Tensor], shape: tuple[int, ...], tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    graph = decompose(prims.trace(fn, *_inputs([shape]), dynamic=True), DECOMPOSITIONS)
    assert graph.symbols
    padded = pad_matmuls(graph, **ON_CPU)
    assert any(node.target == "prims::pad" for node in padded.nodes)
    (specs,) = _mm_specs(padded)
    assert specs[-1].strides == (40, 1)  # the product's rows are 40 floats (160 bytes) apart
    monkeypatch.setattr(pipeline, "pad_matmuls", functools.partial(pad_matmuls, **ON_CPU))
    config = dataclasses.replace(load(InductorConfig), cache=False)
    compiled = pipeline.compile_graph(
        prims.trace(fn, *_inputs([shape]), dynamic=True),
        _inputs([shape]),
        config=config,
        cache=ArtifactCache(tmp_path),
    )
    for rows in (3, 11):  # other sizes than the traced one, through the same Graph
        (x,) = _inputs([(rows, *shape[1:])])
        expected = fn(x)
        torch.testing.assert_close(prims.run(padded, x), expected)
        torch.testing.assert_close(compiled(x), expected, rtol=1e-5, atol=1e-5)


def test_an_unbounded_symbolic_row_count_counts_as_large() -> None:
    """The rows seen at capture say nothing of later calls: a decoder made dynamic at batch
    4 x length 4 (hint 16 rows) left its LM head unpadded for every later length (issue 19:
    7.4 ms at 16x256 on the H100 beside the static graph's 4.1)."""
    fn, _ = SYMBOLIC_CASES[0]
    graph = decompose(prims.trace(fn, *_inputs([(2, 12)]), dynamic=True), DECOMPOSITIONS)
    large = {**ON_CPU, "min_flops": 1 << 30}
    assert any(node.target == "prims::pad" for node in pad_matmuls(graph, **large).nodes)
    static = _graph(fn, _inputs([(2, 12)]))  # 2 x 12 x 37 multiply-adds: left alone
    assert not any(node.target == "prims::pad" for node in pad_matmuls(static, **large).nodes)
