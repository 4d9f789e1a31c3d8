"""`torch.autograd.Function.apply` on tensors that require grad, compiled for training.

Capture records the call as one opaque operator whose Autograd kernel is `apply` itself, so
autodiff traces the Function's own backward. Each Function here has a backward that is NOT
the derivative of its forward where that tells the two apart: the compiled gradients must be
eager's (the custom backward's), with one Graph and no break. Every test runs with and
without EMBER_SERIALIZE_BOUNDARIES=1 (the op's name survives dumps/loads) and with the
aot_eager and inductor backends.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

import ember
from ember.capture import explain


@pytest.fixture(params=["in-memory", "serialized"], autouse=True)
def boundaries(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "serialized":
        monkeypatch.setenv("EMBER_SERIALIZE_BOUNDARIES", "1")
        monkeypatch.setenv("EMBER_VERIFY", "1")
    else:
        monkeypatch.delenv("EMBER_SERIALIZE_BOUNDARIES", raising=False)
        monkeypatch.delenv("EMBER_VERIFY", raising=False)
    ember.capture.reset()
    return str(request.param)


class TimesTwoBackThree(torch.autograd.Function):
    """forward x * 2, backward grad * 3: autodiff of forward would give 2."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return x * 2

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        return grad * 3


class SavedCube(torch.autograd.Function):
    """forward x**3 saving x; backward x * grad (not 3 x**2 grad)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x)
        return x * x * x

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        (x,) = ctx.saved_tensors
        return x * grad


class ScaleBy(torch.autograd.Function):
    """forward x * scale (a Python float); backward grad * (scale + 1), None for scale."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, scale: float) -> torch.Tensor:
        ctx.scale = scale
        return x * scale

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return grad * (ctx.scale + 1), None


class SumAndProduct(torch.autograd.Function):
    """Two tensors in, a tuple of two out; backward swaps which input gets which gradient."""

    @staticmethod
    def forward(ctx: Any, a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        ctx.save_for_backward(a, b)
        return a + b, a * b

    @staticmethod
    def backward(
        ctx: Any, grad_sum: torch.Tensor, grad_product: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        a, b = ctx.saved_tensors
        return grad_sum + grad_product * a, grad_sum * 2 + grad_product * b


def times_two(x: torch.Tensor) -> torch.Tensor:
    return TimesTwoBackThree.apply(x.sin()).cos()


def saved_cube(x: torch.Tensor) -> torch.Tensor:
    return SavedCube.apply(x + 1) * 2


def scale_by(x: torch.Tensor) -> torch.Tensor:
    return ScaleBy.apply(x, 0.5) + ScaleBy.apply(x, 0.5) * ScaleBy.apply(x, 4.0)


def sum_and_product(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    total, product = SumAndProduct.apply(a.exp(), b)
    return total * product.tanh()


CASES: dict[str, tuple[Callable[..., torch.Tensor], int]] = {
    "times_two": (times_two, 1),
    "saved_cube": (saved_cube, 1),
    "scale_by": (scale_by, 1),
    "sum_and_product": (sum_and_product, 2),
}


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_custom_backward_matches_eager(case: str, backend: str) -> None:
    fn, arity = CASES[case]
    torch.manual_seed(0)
    inputs = [torch.randn(3, 4) for _ in range(arity)]
    eager_inputs = [x.clone().requires_grad_() for x in inputs]
    compiled_inputs = [x.clone().requires_grad_() for x in inputs]
    expected = fn(*eager_inputs)
    actual = ember.compile(fn, backend=backend)(*compiled_inputs)
    torch.testing.assert_close(actual, expected)
    weights = torch.randn_like(expected)
    (expected * weights).sum().backward()
    (actual * weights).sum().backward()
    for eager_x, compiled_x in zip(eager_inputs, compiled_inputs):
        torch.testing.assert_close(compiled_x.grad, eager_x.grad)


def test_custom_backward_is_one_graph_without_breaks() -> None:
    x = torch.randn(3, 4, requires_grad=True)
    result = explain(times_two)(x)
    assert len(result.graphs) == 1
    assert result.breaks == []
    targets = [node.target for node in result.graphs[0].nodes]
    assert any(target.startswith("ember_autograd_fn::") for target in targets), targets


def test_gradient_is_the_custom_backward_not_the_derivative() -> None:
    x = torch.randn(5, requires_grad=True)
    ember.compile(lambda t: TimesTwoBackThree.apply(t).sum(), backend="aot_eager")(x).backward()
    torch.testing.assert_close(x.grad, torch.full((5,), 3.0))


def test_inference_graph_runs_the_op_through_inductor() -> None:
    x = torch.randn(3, 4, requires_grad=True)
    with torch.no_grad():
        expected = saved_cube(x)
    compiled = ember.compile(saved_cube, backend="inductor")
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), expected)


transformers = pytest.importorskip("transformers")


def test_bloom_training_matches_eager() -> None:
    """BloomGelu's GeLUFunction in training: gradients through its bloom_gelu_back."""
    torch.manual_seed(0)
    config = transformers.BloomConfig(
        vocab_size=64, hidden_size=16, n_layer=1, n_head=2, pretraining_tp=2
    )
    eager_model = transformers.BloomForCausalLM(config).train()
    compiled_model = transformers.BloomForCausalLM(config).train()
    compiled_model.load_state_dict(eager_model.state_dict())
    ids = torch.randint(0, 64, (2, 6))
    captured = explain(compiled_model)(input_ids=ids, labels=ids)
    assert captured.breaks == [], [b.message for b in captured.breaks]
    assert len(captured.graphs) == 1
    expected = eager_model(input_ids=ids, labels=ids).loss
    compiled = ember.compile(compiled_model, backend="aot_eager")
    actual = compiled(input_ids=ids, labels=ids).loss
    torch.testing.assert_close(actual, expected)
    expected.backward()
    actual.backward()
    eager_parameters = dict(eager_model.named_parameters())
    for name, parameter in compiled_model.named_parameters():
        torch.testing.assert_close(parameter.grad, eager_parameters[name].grad, msg=name)
