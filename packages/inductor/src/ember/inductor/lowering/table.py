"""The lowering table: qualified op name -> the function that lowers one node.

A lowering takes the context and the node's arguments (references already bound to tensor
values) and returns the node's outputs as tensor values (or a list, for multi-output ops).
Registered a line each next to the lowering, like every ember rule table.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ember.inductor.lowering.graph_lowering import LoweringContext

Lowering = Callable[..., Any]

LOWERINGS: dict[str, Lowering] = {}


def lowers(*targets: str) -> Callable[[Lowering], Lowering]:
    """Register a lowering for the named ops."""

    def decorator(fn: Lowering) -> Lowering:
        for target in targets:
            if target in LOWERINGS:
                raise ValueError(f"{target} has two lowerings")
            LOWERINGS[target] = fn
        return fn

    return decorator


__all__ = ["LOWERINGS", "Lowering", "LoweringContext", "lowers"]
