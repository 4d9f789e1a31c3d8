"""The effect classification that decides what passes may remove or merge."""

from __future__ import annotations

import pytest
import torch

from ember.autodiff import analyze_aliasing
from ember.inductor import (
    SIDE_EFFECT_OPS,
    eliminate_common_subexpressions,
    eliminate_dead_code,
    is_effectful,
    is_seeded_random,
)
from ember.prims import Graph, GraphInput, Node, Ref, TensorSpec, TreeSpec, Value, resolve_op, trace


@pytest.mark.parametrize("target", sorted(SIDE_EFFECT_OPS))
def test_every_listed_side_effect_op_exists(target: str) -> None:
    resolve_op(target)


def test_random_ops_are_recognised_from_their_tags() -> None:
    assert is_seeded_random("aten::rand.default")
    assert is_seeded_random("aten::native_dropout.default")
    assert is_seeded_random("aten::uniform_.default")
    assert not is_seeded_random("aten::add.Tensor")
    assert not is_seeded_random("aten::empty.memory_format")


def test_classification_of_a_traced_program() -> None:
    def program(x: torch.Tensor) -> torch.Tensor:
        y = x.sin()
        x.view(-1).add_(1)
        return y + torch.rand(3)

    graph = trace(program, torch.randn(3))
    aliasing = analyze_aliasing(graph)
    effectful = {
        node.target for index, node in enumerate(graph.nodes) if is_effectful(index, node, aliasing)
    }
    assert effectful == {"aten::add_.Tensor", "aten::rand.default"}


def test_a_prim_that_draws_a_seed_is_never_removed_or_merged() -> None:
    try:
        resolve_op("prims::random_seed")
    except KeyError:
        pytest.skip("ember.prims does not define its prims (prims::random_seed) in this version")
    seed = TensorSpec(torch.int64, (), (), torch.device("cpu"))
    x = TensorSpec(torch.float32, (3,), (1,), torch.device("cpu"))
    draw = {"device": torch.device("cpu")}
    graph = Graph(
        inputs=[GraphInput(Value("x", x))],
        nodes=[
            Node("prims::random_seed", [], dict(draw), [Value("unused", seed)]),
            Node("prims::random_seed", [], dict(draw), [Value("first", seed)]),
            Node("prims::random_seed", [], dict(draw), [Value("second", seed)]),
        ],
        input_leaves=[Ref("x")],
        out_spec=TreeSpec("tuple", (TreeSpec("leaf"), TreeSpec("leaf"))),
        output_leaves=[Ref("first"), Ref("second")],
    )
    assert is_seeded_random("prims::random_seed")
    assert len(eliminate_dead_code(graph).nodes) == 3
    assert len(eliminate_common_subexpressions(graph).nodes) == 3
