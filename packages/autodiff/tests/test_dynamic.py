"""Graphs with symbolic sizes (`trace(..., dynamic=True)`): functionalization, the joint trace
and the partition keep the symbols, and one compiled program serves several sizes."""

from __future__ import annotations

import copy

import torch
from torch import nn

from ember.autodiff import aot_eager, partition, trace_joint
from ember.prims import trace
from ember.prims.serialize import dumps, loads


def _scaled_rows(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    y = x @ w + 1
    y[:, 0].mul_(2)
    return y.sum(dim=1), y.view(-1)


def test_one_program_serves_several_batch_sizes() -> None:
    w = torch.randn(3, 5, requires_grad=True)
    graph = trace(_scaled_rows, torch.randn(4, 3), w.detach(), dynamic=True)
    assert graph.symbols
    compiled = aot_eager(graph, [torch.randn(4, 3), w])
    for rows in (4, 7, 2):
        x = torch.randn(rows, 3)
        w_compiled = w.detach().clone().requires_grad_()
        w_eager = w.detach().clone().requires_grad_()
        actual = compiled(x, w_compiled)
        expected = _scaled_rows(x, w_eager)
        torch.testing.assert_close(actual, expected)
        (actual[0].sum() + actual[1].square().sum()).backward()
        (expected[0].sum() + expected[1].square().sum()).backward()
        torch.testing.assert_close(w_compiled.grad, w_eager.grad)


def test_symbolic_joint_and_partition_verify_and_round_trip() -> None:
    graph = trace(_scaled_rows, torch.randn(4, 3), torch.randn(3, 5), dynamic=True)
    joint = trace_joint(graph, [True, True])
    assert joint.graph.symbols.keys() == graph.symbols.keys()
    parts = partition(joint)
    for built in (joint.graph, parts.forward, parts.backward):
        built.verify()
        assert loads(dumps(built)) == built
    assert parts.saved_bytes > 0  # sizes counted at the symbols' hints


def test_module_with_a_dynamic_batch() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 8), nn.Tanh(), nn.Linear(8, 2))
    reference = copy.deepcopy(model)
    compiled = aot_eager(trace(model, torch.randn(4, 3), dynamic=True), [torch.randn(4, 3)])
    for rows in (4, 9):
        x = torch.randn(rows, 3)
        compiled(x).square().sum().backward()
        reference(x).square().sum().backward()
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad, msg=name)


def _normed(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.layer_norm(x @ w, (5,)).tanh()


def test_a_symbolic_joint_is_decomposed_over_its_symbols() -> None:
    # it kept its ATen ops (prims' decompose took static sizes only), so the compiler ran a
    # training graph with a symbolic length op by op
    from ember.prims.decompositions import PRIM_DECOMPOSITIONS

    graph = trace(_normed, torch.randn(4, 3), torch.randn(3, 5), dynamic=True)
    joint = trace_joint(graph, [True, True], PRIM_DECOMPOSITIONS)
    assert joint.graph.symbols.keys() == graph.symbols.keys()
    left = {n.target for n in joint.graph.nodes if n.target in PRIM_DECOMPOSITIONS}
    assert not left, left
    assert all(n.target.startswith("prims::") for n in joint.graph.nodes)
    compiled = aot_eager(graph, [torch.randn(4, 3), torch.randn(3, 5)])
    for rows in (4, 11):
        x = torch.randn(rows, 3)
        w_compiled, w_eager = (torch.randn(3, 5).requires_grad_() for _ in range(2))
        with torch.no_grad():
            w_eager.copy_(w_compiled)
        compiled(x, w_compiled).sum().backward()
        _normed(x, w_eager).sum().backward()
        torch.testing.assert_close(w_compiled.grad, w_eager.grad, rtol=1e-4, atol=1e-5)


def _summed_to_row(x: torch.Tensor) -> torch.Tensor:
    return x.sum_to_size(1, 4) * 2


def test_a_backward_gets_an_input_holding_every_size_symbol() -> None:
    # the gradient of sum_to_size is x's size [s0, 4] but its only input was the [1, 4]
    # tangent: a compiled backward, which reads its symbols from its inputs' sizes, could
    # not know s0 (NameError in inductor's wrapper); the partition saves the primal x too
    import sympy

    graph = trace(_summed_to_row, torch.randn(3, 4), dynamic=True)
    assert set(graph.symbols) == {"s0"}  # the leading size
    parts = partition(trace_joint(graph, [True]))
    bare = {
        str(size)
        for graph_input in parts.backward.inputs
        for size in graph_input.value.spec.shape
        if isinstance(size, sympy.Symbol)
    }
    assert bare == {"s0"}
    compiled = aot_eager(graph, [torch.randn(3, 4)])
    for rows in (3, 7):
        x = torch.randn(rows, 4, requires_grad=True)
        compiled(x).sum().backward()
        torch.testing.assert_close(x.grad, torch.full((rows, 4), 2.0))
