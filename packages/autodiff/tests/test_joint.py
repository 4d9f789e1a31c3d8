"""The joint trace: one Graph whose outputs are the forward outputs and the gradients, equal to
what eager autograd computes, verifiable and serializable."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ember.autodiff import trace_joint
from ember.prims import Graph, run, trace
from ember.prims.decompositions import PRIM_DECOMPOSITIONS
from ember.prims.serialize import dumps, loads


class _Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(6, 8)
        self.norm = nn.LayerNorm(8)
        self.out = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(F.gelu(self.norm(self.linear(x))))


def _joint_inputs(graph: Graph, net: nn.Module, x: torch.Tensor) -> list[torch.Tensor]:
    state = dict(net.named_parameters())
    return [x] + [state[gi.target] for gi in graph.state_inputs() if gi.target is not None]


def _check_gradients(joint_graph: Graph, graph: Graph, net: nn.Module, x: torch.Tensor) -> None:
    primals = _joint_inputs(graph, net, x)
    tangent = torch.randn(x.shape[0], 3)
    (outputs, grads) = run(joint_graph, tuple(p.detach() for p in primals), (tangent,))
    expected = net(x)
    torch.testing.assert_close(outputs[0], expected)
    wanted = [p for p in primals if p.requires_grad]
    expected_grads = torch.autograd.grad(expected, wanted, tangent)
    torch.testing.assert_close([g for g in grads if g is not None], list(expected_grads))


def test_joint_graph_computes_eager_gradients() -> None:
    torch.manual_seed(0)
    net = _Net()
    x = torch.randn(4, 6, requires_grad=True)
    graph = trace(net, x.detach())
    joint = trace_joint(graph, [True] * 7)
    assert joint.differentiable == (True,)
    _check_gradients(joint.graph, graph, net, x)


def test_joint_graph_verifies_and_round_trips() -> None:
    net = _Net()
    graph = trace(net, torch.randn(4, 6))
    joint = trace_joint(graph, [False, True, True, True, True, True, True])
    joint.graph.verify()
    assert loads(dumps(joint.graph)) == joint.graph
    grads = joint.graph.output_leaves[joint.num_forward_outputs :]
    assert grads[0] is None  # the input does not require grad: no gradient computed


def test_decompositions_apply_to_the_joint_graph() -> None:
    torch.manual_seed(0)
    net = _Net()
    x = torch.randn(4, 6, requires_grad=True)
    graph = trace(net, x.detach())
    plain = trace_joint(graph, [True] * 7)
    decomposed = trace_joint(graph, [True] * 7, PRIM_DECOMPOSITIONS)
    plain_ops = plain.graph.op_counts()
    ops = decomposed.graph.op_counts()
    assert "aten::gelu_backward.default" in plain_ops
    assert "aten::gelu_backward.default" not in ops
    assert any(target.startswith("prims::") for target in ops)
    decomposed.graph.verify()
    _check_gradients(decomposed.graph, graph, net, x)


def test_backward_nodes_carry_the_user_line_of_their_forward_op() -> None:
    def fn(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        y = x @ w
        return y.tanh()

    graph = trace(fn, torch.randn(3, 4), torch.randn(4, 5))
    joint = trace_joint(graph, [True, True])
    backward = [n for n in joint.graph.nodes if n.target == "aten::tanh_backward.default"]
    assert backward and backward[0].source is not None
    assert "y.tanh()" in backward[0].source.code
    matmul_grads = [n for n in joint.graph.nodes if n.target == "aten::mm.default"][1:]
    assert matmul_grads and all(
        n.source is not None and "x @ w" in n.source.code for n in matmul_grads
    )


def test_code_run_under_no_grad_gets_no_gradient() -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            scale = x.abs().max()
        return x * scale

    x = torch.randn(5, requires_grad=True)
    graph = trace(fn, x)
    joint = trace_joint(graph, [True])
    tangent = torch.randn(5)
    (_, (grad,)) = run(joint.graph, (x.detach(),), (tangent,))
    (expected,) = torch.autograd.grad(fn(x), x, tangent)
    torch.testing.assert_close(grad, expected)
