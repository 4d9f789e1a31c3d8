"""Functionalization, checked against eager PyTorch: the pure Graph plus its Signature must
reproduce the outputs, the writes to inputs and the outputs' sharing of input memory."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn

from ember.autodiff import FunctionalizationError, analyze_aliasing, aot_eager, functionalize
from ember.prims import trace
from ember.prims.serialize import dumps, loads


def _view_add(x: torch.Tensor) -> torch.Tensor:
    x.view(-1).add_(1)
    return x * 2


def _slice_write(x: torch.Tensor) -> torch.Tensor:
    x[:, 1:3].mul_(2)
    return x.sum(dim=0)


def _through_transpose(x: torch.Tensor) -> torch.Tensor:
    x.t()[0].fill_(3)
    return x + 1


def _split_write(x: torch.Tensor) -> torch.Tensor:
    a, b = x.split(2)
    b.zero_()
    return a * 1


def _unbind_write(x: torch.Tensor) -> torch.Tensor:
    rows = x.unbind(0)
    rows[1].add_(5)
    return rows[0] + rows[1]


def _copy_into(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    y.copy_(x * 2)
    return y


def _out_argument(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    torch.add(x, 1, out=y)
    return y * 3


def _stale_view(x: torch.Tensor) -> torch.Tensor:
    z = x * 1
    v = z[0]
    z.add_(1)
    return v  # a view read after its base was written sees the write


def _return_written_input(x: torch.Tensor) -> torch.Tensor:
    x.add_(1)
    return x


def _view_of_view(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return x.view(2, -1)[1], x.t()


def _diagonal_write(x: torch.Tensor) -> torch.Tensor:
    x.diagonal().zero_()
    return x.t()


def _permute_write(x: torch.Tensor) -> torch.Tensor:
    x.permute(1, 0).mul_(3)
    return x[1:]


def _integer_state(x: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
    count.add_(1)
    return x * 2


PROGRAMS: list[tuple[Callable[..., Any], list[torch.Tensor]]] = [
    (_view_add, [torch.randn(3, 4)]),
    (_slice_write, [torch.randn(3, 4)]),
    (_through_transpose, [torch.randn(3, 4)]),
    (_split_write, [torch.randn(4, 3)]),
    (_unbind_write, [torch.randn(3, 4)]),
    (_copy_into, [torch.randn(3, 4), torch.zeros(3, 4)]),
    (_out_argument, [torch.randn(3, 4), torch.zeros(3, 4)]),
    (_stale_view, [torch.randn(3, 4)]),
    (_return_written_input, [torch.randn(3, 4)]),
    (_view_of_view, [torch.randn(4, 3)]),
    (_diagonal_write, [torch.randn(4, 4)]),
    (_permute_write, [torch.randn(3, 4)]),
    (_integer_state, [torch.randn(3), torch.zeros((), dtype=torch.int64)]),
]


def _flat(result: Any) -> list[torch.Tensor]:
    return list(result) if isinstance(result, (tuple, list)) else [result]


def _storage(tensor: torch.Tensor) -> int:
    return tensor.untyped_storage().data_ptr()


@pytest.mark.parametrize("fn, inputs", PROGRAMS, ids=[fn.__name__ for fn, _ in PROGRAMS])
def test_compiled_program_matches_eager(fn: Callable[..., Any], inputs: list[torch.Tensor]) -> None:
    graph = trace(fn, *[x.clone() for x in inputs])
    compiled = aot_eager(graph, [x.clone() for x in inputs])
    eager_inputs = [x.clone() for x in inputs]
    compiled_inputs = [x.clone() for x in inputs]
    expected = _flat(fn(*eager_inputs))
    actual = _flat(compiled(*compiled_inputs))
    torch.testing.assert_close(actual, expected)
    torch.testing.assert_close(compiled_inputs, eager_inputs)  # the same writes to inputs
    for out_eager, out_compiled in zip(expected, actual):
        for x_eager, x_compiled in zip(eager_inputs, compiled_inputs):
            shares = _storage(out_eager) == _storage(x_eager)
            assert (_storage(out_compiled) == _storage(x_compiled)) == shares
            if shares:
                assert out_compiled.stride() == out_eager.stride()


@pytest.mark.parametrize("fn, inputs", PROGRAMS, ids=[fn.__name__ for fn, _ in PROGRAMS])
def test_functional_graph_is_pure_and_round_trips(
    fn: Callable[..., Any], inputs: list[torch.Tensor]
) -> None:
    graph = trace(fn, *[x.clone() for x in inputs])
    functional = functionalize(graph)
    info = analyze_aliasing(functional.graph)
    assert not info.writes
    assert not info.output_aliases
    functional.graph.verify()
    assert loads(dumps(functional.graph)) == functional.graph
    # The inputs copied back are exactly those the alias analysis says the program writes.
    names = [gi.value.name for gi in functional.signature.inputs]
    written = {names[i] for i, _ in functional.signature.mutations}
    assert written == {m.input for m in analyze_aliasing(graph).mutated_inputs}


def test_signature_names_written_inputs_and_aliased_outputs() -> None:
    functional = functionalize(trace(_copy_into, torch.randn(3, 4), torch.zeros(3, 4)))
    signature = functional.signature
    assert [i for i, _ in signature.mutations] == [1]  # y is written, x is not
    (source,) = signature.outputs
    assert source.kind == "input" and source.index == 1 and source.steps == ()


def test_batch_norm_running_stats_are_written_back() -> None:
    torch.manual_seed(0)
    eager = nn.BatchNorm1d(3).train()
    compiled_module = nn.BatchNorm1d(3).train()
    x = torch.randn(6, 3)
    graph = trace(compiled_module, x)
    functional = functionalize(graph)
    assert "aten::_native_batch_norm_legit_functional.default" in functional.graph.op_counts()
    compiled = aot_eager(graph, [x])
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), eager(x))
    for name, buffer in compiled_module.named_buffers():
        torch.testing.assert_close(buffer, dict(eager.named_buffers())[name], msg=name)


def test_in_place_metadata_change_is_refused_with_the_user_line() -> None:
    def transpose_in_place(x: torch.Tensor) -> torch.Tensor:
        x.t_()
        return x * 2

    graph = trace(transpose_in_place, torch.randn(3, 4))
    with pytest.raises(FunctionalizationError, match=r"test_functionalize.py:\d+.*x.t_\(\)"):
        functionalize(graph)


def test_write_through_expand_is_refused() -> None:
    def write_expanded(x: torch.Tensor) -> torch.Tensor:
        y = x * 1
        y.expand(3, 4).clone()
        y.unsqueeze(0).expand(2, 4).select(0, 0).add_(1)
        return y

    graph = trace(write_expanded, torch.randn(4))
    with pytest.raises(FunctionalizationError, match="expand"):
        functionalize(graph)


def test_outputs_that_share_memory_in_eager_share_it_compiled() -> None:
    def fn(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        y = x * 2
        return y.t(), y, y

    x = torch.randn(3, 4, requires_grad=True)
    compiled = aot_eager(trace(fn, x), [x])
    transposed, whole, again = compiled(x)
    assert whole is again
    assert _storage(transposed) == _storage(whole) and transposed.stride() == (1, 4)
    torch.testing.assert_close(transposed, (x * 2).t())
    (transposed.sum() + whole.square().sum()).backward()
    torch.testing.assert_close(x.grad, 2 + 8 * x.detach())
