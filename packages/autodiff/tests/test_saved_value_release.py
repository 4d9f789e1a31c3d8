"""The runtime hands a backward that has a boxed entry (`call_boxed`) the only references to
the saved values: freed after their last use; a graph kept for another backward
(retain_graph) calls the plain entry, which must leave them alone; with
torch's in-place check, saved-tensor hooks and the double-backward error as before."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import pytest
import torch

from ember.autodiff import DoubleBackwardError, aot
from ember.prims import Graph, Interpreter, trace


class _Boxed:
    """An interpreted backward with a boxed entry that empties its list, as ember-inductor's
    wrapper does, and records which saved values were still alive once it held them alone."""

    def __init__(self, graph: Graph) -> None:
        self.interpreter = Interpreter(graph)
        self.saved = int(graph.meta["saved_inputs"])
        self.alive: list[list[bool]] = []  # per call, per saved tensor
        self.ids: list[list[int]] = []

    def __call__(self, *args: Any) -> Any:
        return self.interpreter(*args)

    def call_boxed(self, args: list[Any]) -> Any:
        refs = [weakref.ref(t) for t in args[: self.saved] if isinstance(t, torch.Tensor)]
        self.ids.append([id(t) for t in args[: self.saved] if isinstance(t, torch.Tensor)])
        values = tuple(args)
        args.clear()
        results = self.interpreter(*values)
        del values
        gc.collect()
        self.alive.append([ref() is not None for ref in refs])
        return results


def _compile(
    fn: Callable[..., Any], inputs: Sequence[torch.Tensor]
) -> tuple[Callable[..., Any], list[_Boxed]]:
    backwards: list[_Boxed] = []

    def backward(graph: Graph, example_inputs: Sequence[Any]) -> _Boxed:
        backwards.append(_Boxed(graph))
        return backwards[-1]

    compiled = aot(trace(fn, *inputs), inputs, lambda g, _: Interpreter(g), backward)
    return compiled, backwards


def _fn(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return (torch.tanh(x @ w) * torch.sigmoid(x @ w)).sum()


def _inputs() -> list[torch.Tensor]:
    torch.manual_seed(0)
    return [torch.randn(4, 3), torch.randn(3, 5, requires_grad=True)]


def _freed_all_but_inputs(backward: _Boxed, inputs: Sequence[torch.Tensor]) -> bool:
    """Whether the first backward freed every saved value but the caller's own inputs."""
    held = {id(t) for t in inputs}
    alive, ids = backward.alive[0], backward.ids[0]
    return len(alive) > len(held) and all(a == (i in held) for a, i in zip(alive, ids))


def _eager_grad(inputs: Sequence[torch.Tensor]) -> torch.Tensor:
    w = inputs[1].detach().requires_grad_()
    _fn(inputs[0], w).backward()
    assert w.grad is not None
    return w.grad


def test_saved_values_are_freed_by_the_boxed_backward() -> None:
    inputs = _inputs()
    compiled, (backward,) = _compile(_fn, inputs)
    compiled(*inputs).backward()
    assert _freed_all_but_inputs(backward, inputs)
    torch.testing.assert_close(inputs[1].grad, _eager_grad(inputs))


def test_retain_graph_keeps_them_for_a_second_backward() -> None:
    inputs = _inputs()
    compiled, (backward,) = _compile(_fn, inputs)
    loss = compiled(*inputs)
    loss.backward(retain_graph=True)
    # kept for another backward: the plain entry, which may not free them or reuse their
    # memory (a CUDA graph's boxed call would)
    assert backward.alive == []
    first = inputs[1].grad.clone()
    loss.backward()
    assert _freed_all_but_inputs(backward, inputs)  # the last backward frees them
    torch.testing.assert_close(first, _eager_grad(inputs))
    torch.testing.assert_close(inputs[1].grad, 2 * first)
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        loss.backward()


def test_a_saved_value_written_in_place_still_raises_torchs_error() -> None:
    def fn(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = torch.sigmoid(x @ w)
        return y, y

    inputs = _inputs()
    compiled, _ = _compile(fn, inputs)
    out, saved_output = compiled(*inputs)
    with torch.no_grad():
        saved_output.add_(1)  # the sigmoid's output, which its backward reads
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        out.sum().backward()


def test_saved_tensor_hooks_see_the_saved_values() -> None:
    inputs = _inputs()
    compiled, (backward,) = _compile(_fn, inputs)
    packed: list[torch.Tensor] = []
    unpacked: list[int] = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        packed.append(t)
        return t

    def unpack(t: torch.Tensor) -> torch.Tensor:
        unpacked.append(1)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
        loss = compiled(*inputs)
    saved = len(packed)
    packed.clear()  # the hook's own references: the packed values are autograd's alone
    loss.backward()
    assert saved == backward.saved and len(unpacked) == saved
    assert _freed_all_but_inputs(backward, inputs)
    torch.testing.assert_close(inputs[1].grad, _eager_grad(inputs))


def test_create_graph_still_raises_the_double_backward_error() -> None:
    def cube(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return (x @ w**3).sum()  # the backward reads w, which requires grad

    inputs = _inputs()
    compiled, _ = _compile(cube, inputs)
    (grad,) = torch.autograd.grad(compiled(*inputs), inputs[1], create_graph=True)
    torch.testing.assert_close(grad, 3 * inputs[1].detach() ** 2 * inputs[0].sum(0)[:, None])
    with pytest.raises(DoubleBackwardError, match="double backward"):
        grad.sum().backward()
