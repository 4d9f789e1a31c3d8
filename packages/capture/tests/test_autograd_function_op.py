"""`Function.apply` on tensors that require grad is one opaque operator keeping its backward.

The Functions' backwards are deliberately not the derivatives of their forwards, so a
gradient computed from the inlined forward would differ from eager's.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from ember.capture import Unsupported, explain
from ember.capture.compile import compile as ember_compile


class TimesTwoBackThree(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return x * 2

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        return grad * 3


class Split(torch.autograd.Function):
    """A tuple out, a bound Python int; backward ignores the second output's gradient."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, shift: int) -> tuple[torch.Tensor, torch.Tensor]:
        ctx.save_for_backward(x)
        return x + shift, x * x

    @staticmethod
    def backward(ctx: Any, grad_a: torch.Tensor, grad_b: torch.Tensor) -> tuple[Any, None]:
        (x,) = ctx.saved_tensors
        return grad_a * x, None


def times_two(x: torch.Tensor) -> torch.Tensor:
    return TimesTwoBackThree.apply(x.sin()) + 1


def split(x: torch.Tensor) -> torch.Tensor:
    a, b = Split.apply(x, 2)
    return a * 3 + b


def _grads(fn: Any, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    leaf = x.clone().requires_grad_()
    out = fn(leaf)
    out.sum().backward()
    assert leaf.grad is not None
    return out.detach(), leaf.grad


@pytest.mark.parametrize("fn", [times_two, split])
def test_one_graph_and_eager_gradients(fn: Any) -> None:
    x = torch.randn(4, 3)
    result = explain(fn)(x.clone().requires_grad_())
    assert len(result.graphs) == 1
    assert result.breaks == []
    targets = [node.target for node in result.graphs[0].nodes]
    assert sum(t.startswith("ember_autograd_fn::") for t in targets) == 1, targets
    expected_out, expected_grad = _grads(fn, x)
    actual_out, actual_grad = _grads(ember_compile(fn, backend="eager"), x)
    torch.testing.assert_close(actual_out, expected_out)
    torch.testing.assert_close(actual_grad, expected_grad)


def test_output_requires_grad_in_the_captured_graph() -> None:
    result = explain(times_two)(torch.randn(3, requires_grad=True))
    (node,) = [n for n in result.graphs[0].nodes if n.target.startswith("ember_autograd_fn::")]
    assert node.outputs[0][0].spec.requires_grad


def test_without_grad_forward_is_still_inlined() -> None:
    result = explain(times_two)(torch.randn(3))
    targets = [node.target for node in result.graphs[0].nodes]
    assert not any(t.startswith("ember_autograd_fn::") for t in targets), targets


def keyword_argument(x: torch.Tensor) -> torch.Tensor:
    return Split.apply(x, shift=1)[0]


def test_keyword_arguments_still_break() -> None:
    with pytest.raises(Unsupported, match="keyword arguments"):
        ember_compile(keyword_argument, backend="eager", fullgraph=True)(
            torch.randn(3, requires_grad=True)
        )
