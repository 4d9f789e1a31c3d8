"""The decomposition tables: qualified ATen overload name -> function that computes it.

`PRIM_DECOMPOSITIONS` entries are written with prims, or with ATen ops that have entries of
their own (`decompose` expands those in its following rounds, so the result is all prims);
`CORE_ATEN_DECOMPOSITIONS` is the table for vendors that prefer ATen-level ops (empty yet:
TODO(issue 7)). A function takes the node's arguments as the ATen schema does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Decomposition = Callable[..., Any]

PRIM_DECOMPOSITIONS: dict[str, Decomposition] = {}
CORE_ATEN_DECOMPOSITIONS: dict[str, Decomposition] = {}


def _register(
    table: dict[str, Decomposition], targets: tuple[str, ...]
) -> Callable[[Decomposition], Decomposition]:
    def decorator(fn: Decomposition) -> Decomposition:
        for target in targets:
            if target in table:
                raise ValueError(f"{target} has two decompositions")
            table[target] = fn
        return fn

    return decorator


def to_prims(*targets: str) -> Callable[[Decomposition], Decomposition]:
    """Register a decomposition of the named ATen overloads written with prims."""
    return _register(PRIM_DECOMPOSITIONS, targets)


def to_core_aten(*targets: str) -> Callable[[Decomposition], Decomposition]:
    """Register a decomposition of the named ATen overloads written with core ATen ops."""
    return _register(CORE_ATEN_DECOMPOSITIONS, targets)
