"""The verifier accepts traced Graphs and names the broken rule in broken ones."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from ember.prims import GraphVerificationError, Ref, Value, trace, verify
from ember.prims.graph import InputKind, Node
from ember.prims.specs import TensorSpec


def _graph():
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    return trace(model, torch.randn(3, 4))


def test_traced_graph_verifies() -> None:
    verify(_graph())


def test_use_before_definition() -> None:
    graph = _graph()
    graph.nodes[0], graph.nodes[1] = graph.nodes[1], graph.nodes[0]
    with pytest.raises(GraphVerificationError, match="before it is defined"):
        verify(graph)


def test_duplicate_value_name() -> None:
    graph = _graph()
    first = graph.nodes[0].outputs[0]
    second = graph.nodes[1].outputs[0]
    assert isinstance(first, Value) and isinstance(second, Value)
    graph.nodes[1].outputs[0] = Value(first.name, second.spec)
    with pytest.raises(GraphVerificationError, match="defined twice"):
        verify(graph)


def test_unknown_operator() -> None:
    graph = _graph()
    graph.nodes[0].target = "aten::no_such_op.default"
    with pytest.raises(GraphVerificationError, match="unknown operator"):
        verify(graph)


def test_output_count_must_match_schema() -> None:
    graph = _graph()
    node = graph.nodes[0]
    node.outputs.append(None)
    with pytest.raises(GraphVerificationError, match="outputs, the schema returns"):
        verify(graph)


def test_unknown_keyword_argument() -> None:
    graph = _graph()
    graph.nodes[0].kwargs["bogus"] = 1
    with pytest.raises(GraphVerificationError, match="unknown keyword"):
        verify(graph)


def test_constant_must_match_declared_spec() -> None:
    graph = _graph()
    target = graph.state_inputs()[0].target
    assert target is not None
    graph.constants[target] = torch.zeros(1)
    with pytest.raises(GraphVerificationError, match="declared"):
        verify(graph)


def test_missing_literal_constant() -> None:
    graph = _graph()
    spec = TensorSpec.of(torch.zeros(2))
    from ember.prims.graph import GraphInput

    graph.inputs.append(GraphInput(Value("c0", spec), InputKind.CONSTANT, "c0"))
    with pytest.raises(GraphVerificationError, match="constants table"):
        verify(graph)


def test_signature_must_place_every_user_input() -> None:
    graph = _graph()
    graph.input_leaves = [3]
    with pytest.raises(GraphVerificationError, match="place every user input"):
        verify(graph)


def test_undeclared_symbol() -> None:
    graph = trace(lambda x: x * 2, torch.randn(4, 3), dynamic=True)
    verify(graph)
    broken = copy.copy(graph)
    broken.symbols = {}
    with pytest.raises(GraphVerificationError, match="undeclared symbols"):
        verify(broken)


def test_tensor_return_must_be_tensor_value() -> None:
    graph = _graph()
    node: Node = graph.nodes[-1]
    node.outputs[0] = [Value("pieces", node.outputs[0].spec)]  # type: ignore[union-attr]
    graph.output_leaves = [Ref("x")]
    with pytest.raises(GraphVerificationError, match="must be a tensor value"):
        verify(graph)


def test_undefined_tensor_return_is_allowed() -> None:
    # Backward ops return undefined tensors (None) for the outputs their mask skips.
    weight = torch.randn(4, 3, 3, 3, requires_grad=True)
    x = torch.randn(2, 3, 6, 6)

    def weight_grad(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        out = torch.nn.functional.conv2d(x, weight)
        return torch.autograd.grad(out.sum(), weight)[0]

    graph = trace(weight_grad, x, weight)
    assert any(
        node.target == "aten::convolution_backward.default" and node.outputs[0] is None
        for node in graph.nodes
    )
    verify(graph)
