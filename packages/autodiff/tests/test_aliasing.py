"""Alias and mutation analysis, checked against what eager PyTorch actually does.

For each program the analysis of its traced Graph must name exactly the inputs that eager
execution changes, and exactly the outputs that share storage with an input or each other.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn

from ember.autodiff import AliasAnalysisError, analyze_aliasing
from ember.prims import Graph, GraphInput, Node, Ref, TensorSpec, Value, resolve_op, trace


def _storage(tensor: torch.Tensor) -> int:
    return tensor.untyped_storage().data_ptr()


def _eager_truth(
    fn: Callable[..., Any], inputs: list[torch.Tensor]
) -> tuple[set[int], dict[int, int], set[tuple[int, int]]]:
    """Inputs changed by running `fn`, output → input storage sharing, and output pairs sharing."""
    before = [x.clone() for x in inputs]
    outputs = fn(*inputs)
    outputs = list(outputs) if isinstance(outputs, (tuple, list)) else [outputs]
    changed = {i for i, (x, old) in enumerate(zip(inputs, before)) if not _same(x, old)}
    aliases = {
        o: i
        for o, out in enumerate(outputs)
        for i, x in enumerate(inputs)
        if _storage(out) == _storage(x)
    }
    pairs = {
        (a, b)
        for a in range(len(outputs))
        for b in range(a + 1, len(outputs))
        if _storage(outputs[a]) == _storage(outputs[b])
    }
    return changed, aliases, pairs


def _same(x: torch.Tensor, old: torch.Tensor) -> bool:
    return x.shape == old.shape and x.stride() == old.stride() and torch.equal(x, old)


def _view_add(x: torch.Tensor) -> torch.Tensor:
    x.view(-1).add_(1)
    return x * 2


def _transpose(x: torch.Tensor) -> torch.Tensor:
    return x.t()


def _add_in_place_and_return(x: torch.Tensor) -> torch.Tensor:
    return x.add_(1)


def _slice_of_slice_write(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    x[1:][:, 0].mul_(3)
    return y + 1


def _copy_into_second(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    y.copy_(x.sin())
    return x


def _out_variant(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    torch.add(x, 1, out=y)
    return x


def _outputs_alias_each_other(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    y = x * 2
    return y, y.view(-1), x.split(2)[1]


def _temporaries_only(x: torch.Tensor) -> torch.Tensor:
    y = x.clone()
    y.relu_()
    return y.sum(0)


def _unbind_write(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    y.unbind(0)[0].zero_()
    return x


PROGRAMS: dict[str, tuple[Callable[..., Any], int]] = {
    "view_add": (_view_add, 1),
    "transpose": (_transpose, 1),
    "add_in_place_and_return": (_add_in_place_and_return, 1),
    "slice_of_slice_write": (_slice_of_slice_write, 2),
    "copy_into_second": (_copy_into_second, 2),
    "out_variant": (_out_variant, 2),
    "outputs_alias_each_other": (_outputs_alias_each_other, 1),
    "temporaries_only": (_temporaries_only, 1),
    "unbind_write": (_unbind_write, 2),
}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_analysis_matches_eager(name: str) -> None:
    fn, arity = PROGRAMS[name]
    torch.manual_seed(0)
    inputs = [torch.randn(4, 4) for _ in range(arity)]
    graph = trace(fn, *[x.clone() for x in inputs])
    info = analyze_aliasing(graph)
    changed, aliases, pairs = _eager_truth(fn, inputs)

    names = [gi.value.name for gi in graph.user_inputs()]
    assert {m.input for m in info.mutated_inputs} == {names[i] for i in changed}
    assert {a.output: a.input for a in info.output_aliases} == {
        o: names[i] for o, i in aliases.items()
    }
    reported_pairs = {
        (a, b) for group in info.aliased_outputs for a in group for b in group if a < b
    }
    assert reported_pairs == pairs


def test_batch_norm_in_training_mutates_its_running_stats() -> None:
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4)).train()
    x = torch.randn(2, 3, 8, 8)
    info = analyze_aliasing(trace(model, x))

    before = {name: b.clone() for name, b in model.named_buffers()}
    model(x)
    changed = {name for name, b in model.named_buffers() if not torch.equal(b, before[name])}
    assert changed == {"1.running_mean", "1.running_var", "1.num_batches_tracked"}
    assert {m.target for m in info.mutated_inputs} == changed
    assert all(m.mutates_data and not m.through_view for m in info.mutated_inputs)
    assert info.output_aliases == ()


def test_batch_norm_in_eval_mode_mutates_nothing() -> None:
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4)).eval()
    info = analyze_aliasing(trace(model, torch.randn(2, 3, 8, 8)))
    assert info.mutated_inputs == ()
    assert info.writes == ()


def test_pure_mlp_mutates_nothing() -> None:
    model = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 4))
    info = analyze_aliasing(trace(model, torch.randn(3, 8)))
    assert info.mutated_inputs == ()
    assert info.output_aliases == ()
    assert info.aliased_outputs == ()


def test_write_through_a_view_is_reported_as_such() -> None:
    graph = trace(_view_add, torch.randn(3, 4))
    info = analyze_aliasing(graph)
    (mutation,) = info.mutated_inputs
    assert mutation.input == "x"
    assert mutation.through_view
    assert mutation.mutates_data and not mutation.mutates_metadata
    assert [graph.nodes[i].target for i in mutation.nodes] == ["aten::add_.Tensor"]
    assert info.is_mutated("x")


def test_returned_transpose_is_a_view_of_its_input() -> None:
    info = analyze_aliasing(trace(_transpose, torch.randn(3, 4)))
    (alias,) = info.output_aliases
    assert (alias.output, alias.input, alias.is_view) == (0, "x", True)
    assert info.mutated_inputs == ()


def test_input_returned_after_an_in_place_op_is_the_input_itself() -> None:
    info = analyze_aliasing(trace(_add_in_place_and_return, torch.randn(3)))
    (alias,) = info.output_aliases
    assert (alias.input, alias.is_view) == ("x", False)
    (mutation,) = info.mutated_inputs
    assert not mutation.through_view


def test_metadata_mutation_is_distinguished() -> None:
    def transpose_in_place(x: torch.Tensor) -> torch.Tensor:
        x.t_()
        return x + 1

    info = analyze_aliasing(trace(transpose_in_place, torch.randn(3, 4)))
    (mutation,) = info.mutated_inputs
    assert mutation.mutates_metadata and not mutation.mutates_data


def test_storage_roots_follow_views_and_writes() -> None:
    graph = trace(_outputs_alias_each_other, torch.randn(4, 4))
    info = analyze_aliasing(graph)
    mul, view = (leaf.name for leaf in graph.output_leaves[:2])
    assert info.storage[view] == info.storage[mul] == mul
    assert view in info.views and mul not in info.views
    assert info.written_storages() == frozenset()


def test_list_writes_mutate_every_element() -> None:
    # _foreach_add_(Tensor(a!)[] self, Scalar) -> (): the write sits on a list argument.
    spec = TensorSpec(torch.float32, (3,), (1,), torch.device("cpu"))
    graph = Graph(
        inputs=[GraphInput(Value("x", spec)), GraphInput(Value("y", spec))],
        nodes=[Node("aten::_foreach_add_.Scalar", [[Ref("x"), Ref("y")], 1.0], {}, [])],
        input_leaves=[Ref("x"), Ref("y")],
        output_leaves=[None],
    )
    info = analyze_aliasing(graph)
    assert [m.input for m in info.mutated_inputs] == ["x", "y"]
    assert [w.node for w in info.writes_of(0)] == [0, 0]


def test_undefined_reference_is_an_analysis_error() -> None:
    spec = TensorSpec(torch.float32, (3,), (1,), torch.device("cpu"))
    graph = Graph(
        inputs=[GraphInput(Value("x", spec))],
        nodes=[Node("aten::add_.Scalar", [Ref("missing"), 1], {}, [Value("add_", spec)])],
        input_leaves=[Ref("x")],
        output_leaves=[Ref("add_")],
    )
    with pytest.raises(AliasAnalysisError, match="missing"):
        analyze_aliasing(graph)


def test_unknown_operator_is_an_analysis_error() -> None:
    spec = TensorSpec(torch.float32, (3,), (1,), torch.device("cpu"))
    graph = Graph(
        inputs=[GraphInput(Value("x", spec))],
        nodes=[Node("vendor::mystery.default", [Ref("x")], {}, [Value("y", spec)])],
        input_leaves=[Ref("x")],
        output_leaves=[Ref("y")],
    )
    with pytest.raises(AliasAnalysisError, match="unknown operator vendor::mystery"):
        analyze_aliasing(graph)


def test_prim_schemas_declare_their_writes() -> None:
    try:
        resolve_op("prims::copy_to")
    except KeyError:
        pytest.skip("ember.prims does not define its prims (prims::copy_to) in this version")
    spec = TensorSpec(torch.float32, (3,), (1,), torch.device("cpu"))
    graph = Graph(
        inputs=[GraphInput(Value("x", spec)), GraphInput(Value("y", spec))],
        nodes=[Node("prims::copy_to", [Ref("x"), Ref("y")], {}, [Value("copy", spec)])],
        input_leaves=[Ref("x"), Ref("y")],
        output_leaves=[Ref("copy")],
    )
    info = analyze_aliasing(graph)
    assert [m.input for m in info.mutated_inputs] == ["x"]
    assert [(a.output, a.input, a.is_view) for a in info.output_aliases] == [(0, "x", False)]
