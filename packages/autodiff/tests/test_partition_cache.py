"""The partition cache: a second `aot` of the same Graph takes the forward and backward
halves from the store instead of tracing the joint Graph again, and computes eager's
gradients; a damaged entry or a change of the inputs that require grad is a miss."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from typing import Any

import pytest
import torch

from ember.autodiff import aot
from ember.prims import Graph, Interpreter, trace

aot_module = importlib.import_module("ember.autodiff.aot")  # the package exports the function


def _interpret(graph: Graph, example_inputs: Sequence[Any]) -> Callable[..., Any]:
    return Interpreter(graph)


class DictStore:
    def __init__(self) -> None:
        self.entries: dict[str, bytes] = {}
        self.hits = 0

    def get(self, key: str) -> bytes | None:
        found = self.entries.get(key)
        self.hits += found is not None
        return found

    def put(self, key: str, data: bytes) -> bool:
        assert len(key) == 64
        self.entries[key] = data
        return True


def _block(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.gelu(x @ w + b).softmax(-1).sum()


def _inputs() -> list[torch.Tensor]:
    torch.manual_seed(0)
    return [
        torch.randn(4, 3),
        torch.randn(3, 5, requires_grad=True),
        torch.randn(5, requires_grad=True),
    ]


def _gradients(store: DictStore, graph: Graph) -> list[torch.Tensor]:
    inputs = _inputs()
    compiled = aot(graph, inputs, _interpret, _interpret, store=store)
    compiled(*inputs).backward()
    return [inputs[1].grad, inputs[2].grad]


def test_second_compile_skips_the_joint_trace(monkeypatch: pytest.MonkeyPatch) -> None:
    graph = trace(_block, *_inputs())
    store = DictStore()
    first = _gradients(store, graph)
    assert len(store.entries) == 1 and store.hits == 0

    def no_trace(*args: object, **kwargs: object) -> None:
        raise AssertionError("the joint Graph was traced again")

    monkeypatch.setattr(aot_module, "trace_joint", no_trace)
    second = _gradients(store, trace(_block, *_inputs()))  # a new Graph, equal to the first
    assert store.hits == 1
    inputs = _inputs()
    _block(*inputs).backward()
    for got, again, expected in zip(first, second, [inputs[1].grad, inputs[2].grad]):
        torch.testing.assert_close(got, expected)
        torch.testing.assert_close(again, expected)


def test_damaged_entries_and_other_grad_flags_miss() -> None:
    graph = trace(_block, *_inputs())
    store = DictStore()
    _gradients(store, graph)
    (key,) = store.entries
    store.entries[key] = store.entries[key][:-40]  # truncated: decodes to nothing
    _gradients(store, graph)
    assert store.hits == 1 and len(store.entries[key]) > 100  # traced again and rewritten
    inputs = _inputs()
    inputs[2] = inputs[2].detach()  # another pattern of inputs that require grad
    aot(graph, inputs, _interpret, _interpret, store=store)(*inputs).backward()
    assert len(store.entries) == 2
