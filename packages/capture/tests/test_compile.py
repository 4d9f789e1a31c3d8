"""compile(): decorator forms, backends by name and callable, signatures, codegen hygiene."""

from __future__ import annotations

import inspect

import pytest
import torch
from torch import nn

from ember.capture import BackendNotFound
from ember.capture.compile import compile as ember_compile
from ember.capture.testing import CompileCounter


def affine(x, weight, *, bias=None):
    y = x * weight
    return y if bias is None else y + bias


def test_decorator_without_target() -> None:
    counter = CompileCounter()

    @ember_compile(backend=counter)
    def fn(x):
        return x.sin() + 1

    x = torch.randn(3)
    torch.testing.assert_close(fn(x), x.sin() + 1)
    assert counter.frame_count == 1


def test_backend_by_name() -> None:
    compiled = ember_compile(affine, backend="eager")
    x = torch.randn(3)
    torch.testing.assert_close(compiled(x, 2.0, bias=x), affine(x, 2.0, bias=x))


def test_missing_backend_says_what_to_install() -> None:
    from ember.capture import KNOWN_BACKENDS, list_backends

    missing = [name for name in KNOWN_BACKENDS if name not in list_backends()]
    if not missing:
        pytest.skip("every ember backend is installed here")
    with pytest.raises(BackendNotFound, match=KNOWN_BACKENDS[missing[0]]):
        ember_compile(affine, backend=missing[0])


def test_signature_and_name_are_kept() -> None:
    compiled = ember_compile(affine, backend=CompileCounter())
    assert compiled.__name__ == "affine"
    assert inspect.signature(compiled) == inspect.signature(affine)
    with pytest.raises(TypeError):
        compiled(torch.ones(1), 1.0, 2.0)  # bias is keyword-only, as in the original


def test_compiled_callable_is_not_written_into_globals() -> None:
    before = set(globals())
    compiled = ember_compile(affine, backend=CompileCounter())
    compiled(torch.ones(2), 3.0)
    assert set(globals()) == before


def test_bound_method() -> None:
    class Holder:
        def __init__(self) -> None:
            self.k = 3.0

        def apply(self, x):
            return x * self.k

    holder = Holder()
    counter = CompileCounter()
    compiled = ember_compile(holder.apply, backend=counter)
    torch.testing.assert_close(compiled(torch.ones(2)), torch.full((2,), 3.0))
    assert counter.frame_count == 1


def test_nodes_carry_user_lines() -> None:
    counter = CompileCounter()
    compiled = ember_compile(affine, backend=counter)
    compiled(torch.ones(2), 2.0, bias=torch.ones(2))
    (graph,) = counter.graphs
    lines = {node.source.code for node in graph.nodes}
    assert "y = x * weight" in lines


def test_compiled_module_shares_state_and_is_an_instance() -> None:
    model = nn.Linear(3, 2)
    compiled = ember_compile(model, backend=CompileCounter())
    assert isinstance(compiled, nn.Linear)
    assert compiled.weight is model.weight
    assert list(compiled.state_dict()) == list(model.state_dict())
    with torch.no_grad():
        model.weight.zero_()
    torch.testing.assert_close(compiled(torch.ones(1, 3)), model(torch.ones(1, 3)))


def test_graph_names_the_inputs_that_are_parameters_and_buffers() -> None:
    """`meta["state_inputs"]`: the positions a CUDA graph may read in place (a module's
    parameters and buffers), not the user's tensors or plain tensor attributes."""
    seen = []

    def backend(graph, example_inputs):
        seen.append((graph, list(example_inputs)))
        return lambda *args: graph_run(graph, args)

    def graph_run(graph, args):
        from ember.prims import run

        return run(graph, *args)

    class Norm(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.scale = nn.Parameter(torch.ones(4))
            self.register_buffer("shift", torch.zeros(4))
            self.plain = torch.full((4,), 2.0)  # an attribute, not a buffer

        def forward(self, x):
            return x * self.scale + self.shift + self.plain

    model = Norm()
    x = torch.randn(4)
    torch.testing.assert_close(ember_compile(model, backend=backend)(x), model(x))
    ((graph, inputs),) = seen
    state = [inputs[int(p)] for p in graph.meta["state_inputs"].split(",")]
    assert {id(t) for t in state} == {id(model.scale), id(model.shift)}
