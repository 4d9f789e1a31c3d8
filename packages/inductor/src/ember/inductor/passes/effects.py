"""Which nodes do more than compute their outputs, and so must never be removed or merged.

A node is effectful if it writes any tensor in place (by its schema's `Tensor(a!)` arguments
or the undeclared-writes table of ember-autodiff), draws from a random generator, is on the
known side-effect list (asserts, printing, stream and profiler bookkeeping), calls a nested
graph, returns nothing, or has no torch schema to tell us otherwise. When unsure: effectful.
"""

from __future__ import annotations

import torch

from ember.autodiff import AliasInfo
from ember.prims import Node, SubgraphRef, resolve_op
from ember.prims.ops import op_schema

# Ops whose effect is outside the tensors they return and that their schema does not show.
SIDE_EFFECT_OPS: frozenset[str] = frozenset(
    {
        "aten::_assert_async.default",
        "aten::_assert_async.msg",
        "aten::_assert_scalar.default",
        "aten::_assert_tensor_metadata.default",
        "aten::_print.default",
        "aten::sym_constrain_range.default",
        "aten::sym_constrain_range_for_size.default",
        "aten::record_stream.default",
        "profiler::_record_function_enter.default",
        "profiler::_record_function_enter_new.default",
        "profiler::_record_function_exit._RecordFunction",
    }
)


# Random ops that carry no torch tags to say so: ember prims that draw from the host generator.
# (`prims::uniform`/`prims::normal` take an explicit seed and offset: they are pure.)
SEEDED_RANDOM_OPS: frozenset[str] = frozenset({"prims::random_seed"})


def is_seeded_random(target: str) -> bool:
    """Whether the op draws from a random generator (its result depends on generator state)."""
    if target in SEEDED_RANDOM_OPS:
        return True
    op = resolve_op(target)
    return torch.Tag.nondeterministic_seeded in getattr(op, "tags", ())


def is_effectful(index: int, node: Node, aliasing: AliasInfo) -> bool:
    """Whether node number `index` must stay, and stay distinct, whatever uses its outputs."""
    try:
        schema = op_schema(node.target)
    except (KeyError, ValueError):
        return True  # an op we cannot resolve: assume the worst
    if schema is None or not node.outputs:
        return True
    if aliasing.writes_of(index) or node.target in SIDE_EFFECT_OPS:
        return True
    if is_seeded_random(node.target):
        return True
    return any(isinstance(arg, SubgraphRef) for arg in (*node.args, *node.kwargs.values()))
