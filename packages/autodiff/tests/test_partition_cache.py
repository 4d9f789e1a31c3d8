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


def _forbid(monkeypatch: pytest.MonkeyPatch, *names: str) -> None:
    def forbidden(*args: object, **kwargs: object) -> None:
        raise AssertionError("a partition-cache hit ran a stage it does not need")

    for name in names:
        monkeypatch.setattr(aot_module, name, forbidden)


def test_a_hit_neither_functionalizes_nor_allocates_backward_examples(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A warm start needs the halves and the calling convention, both in the entry: no
    functionalization, no joint trace, and no zero-filled examples for a backward compiler
    that does not read them (ember-inductor's: GPT-2 small's saved activations are GBs)."""
    store = DictStore()
    first = _gradients(store, trace(_block, *_inputs()))
    _forbid(monkeypatch, "functionalize", "trace_joint", "_zeros_for")
    second = _gradients(store, trace(_block, *_inputs()))
    assert store.hits == 1
    for got, expected in zip(second, first):
        torch.testing.assert_close(got, expected)


def test_a_backward_compiler_that_reads_its_examples_gets_zeros() -> None:
    seen: list[list[torch.Tensor]] = []

    def backward_compiler(graph: Graph, example_inputs: Sequence[Any]) -> Callable[..., Any]:
        seen.append(list(example_inputs))
        assert len(example_inputs) == len(graph.user_inputs())
        return Interpreter(graph)

    inputs = _inputs()
    graph = trace(_block, *inputs)
    aot(graph, inputs, _interpret, backward_compiler, store=DictStore())(*inputs).backward()
    (examples,) = seen
    assert examples and all(not t.any() for t in examples)
    backward_graph = _halves(graph, inputs)[1]
    shapes = [tuple(getattr(gi.value.spec, "shape", ())) for gi in backward_graph.user_inputs()]
    assert [tuple(t.shape) for t in examples] == shapes


def _halves(graph: Graph, inputs: list[torch.Tensor]) -> list[Graph]:
    graphs: list[Graph] = []

    def keep(graph: Graph, example_inputs: Sequence[Any]) -> Callable[..., Any]:
        graphs.append(graph)
        return Interpreter(graph)

    aot(graph, inputs, keep, keep)
    return graphs


def _stats(x: torch.Tensor, w: torch.Tensor, mean: torch.Tensor) -> tuple[Any, ...]:
    mean.mul_(0.5).add_(x.mean(dim=0))  # a written input: copied back after each call
    return (x @ w).tanh().sum(), 3, mean.shape[0]


def test_a_hit_keeps_copy_backs_and_literal_outputs(monkeypatch: pytest.MonkeyPatch) -> None:
    def run(store: DictStore) -> tuple[Any, ...]:
        torch.manual_seed(0)
        x, w, mean = torch.randn(4, 3), torch.randn(3, 2, requires_grad=True), torch.zeros(3)
        graph = trace(_stats, x, w, mean.clone())
        loss, three, size = aot(graph, [x, w, mean], _interpret, _interpret, store=store)(
            x, w, mean
        )
        loss.backward()
        return loss, three, size, mean, w.grad

    store = DictStore()
    cold = run(store)
    _forbid(monkeypatch, "functionalize", "trace_joint")
    warm = run(store)
    assert store.hits == 1
    assert warm[1:3] == cold[1:3] == (3, 3)
    for got, expected in zip((warm[0], *warm[3:]), (cold[0], *cold[3:])):
        torch.testing.assert_close(got, expected)
    assert cold[3].abs().sum() > 0  # the copy-back wrote the caller's tensor


def _view_out(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return (x @ w).sum(), x.t()  # an output rebuilt as a view of the input


def test_outputs_rebuilt_through_views_are_functionalized_on_a_hit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Only plain-data signatures are kept: view steps make a hit functionalize again (and
    still skip the joint trace)."""
    x, w = torch.randn(4, 3), torch.randn(3, 2, requires_grad=True)
    graph = trace(_view_out, x, w)
    store = DictStore()
    aot(graph, [x, w], _interpret, _interpret, store=store)(x, w)[0].backward()
    _forbid(monkeypatch, "trace_joint")
    calls: list[int] = []
    original = aot_module.functionalize

    def counted(graph: Graph) -> Any:
        calls.append(1)
        return original(graph)

    monkeypatch.setattr(aot_module, "functionalize", counted)
    _, view = aot(graph, [x, w], _interpret, _interpret, store=store)(x, w)
    assert store.hits == 1 and calls == [1]
    assert view.data_ptr() == x.data_ptr() and view.shape == (3, 4)


def test_an_entry_whose_signature_does_not_fit_the_graph_is_a_miss() -> None:
    graph = trace(_block, *_inputs())
    store = DictStore()
    _gradients(store, graph)
    ((key, data),) = store.entries.items()
    length = int.from_bytes(data[:8], "little")
    header = data[8 : 8 + length]
    bad = header.replace(b'"computed": 1', b'"computed": 7')
    assert bad != header and len(bad) == len(header)
    store.entries[key] = data[:8] + bad + data[8 + length :]
    gradients = _gradients(store, graph)  # traced again
    assert b'"computed": 7' not in store.entries[key]  # rewritten
    inputs = _inputs()
    _block(*inputs).backward()
    torch.testing.assert_close(gradients[0], inputs[1].grad)


def test_a_hit_hands_the_compilers_the_captured_graphs_own_constants() -> None:
    """The format loads constants on the CPU; a warm start's halves must hold the captured
    Graph's tensors (on its device, the objects a cold compile binds), not those copies."""
    scale = torch.full((5,), 2.0)

    def scaled(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return ((x @ w) * scale).sum()

    seen: list[Graph] = []

    def keep(graph: Graph, example_inputs: Sequence[Any]) -> Callable[..., Any]:
        seen.append(graph)
        return Interpreter(graph)

    store = DictStore()
    for _ in range(2):  # cold, then warm
        graph = trace(scaled, *_inputs()[:2])
        inputs = _inputs()[:2]
        aot(graph, inputs, keep, keep, store=store)(*inputs).backward()
        torch.testing.assert_close(inputs[1].grad, inputs[0].sum(0)[:, None] * scale)
        own = {id(t) for t in graph.constants.values()}
        for half in seen[-2:]:
            for tensor in half.constants.values():
                assert id(tensor) in own, "a constant of the cached halves is a loaded copy"
    assert store.hits == 1
