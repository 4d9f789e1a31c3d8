"""The effect classification that decides what passes may remove or merge."""

from __future__ import annotations

import pytest
import torch

from ember.autodiff import analyze_aliasing
from ember.inductor import SIDE_EFFECT_OPS, is_effectful, is_seeded_random
from ember.prims import resolve_op, trace


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
