"""`ValueScopes`: the common-subexpression table a kernel writer keeps while emitting a body.

Each emitted value is filed under a key of its op and operands' keys in the innermost scope
(a loop or a masked block opens one); a lookup searches outward. A store forgets the loads of
its storage (they would read the old value). Shared by the C++ and Triton generators.
"""

from __future__ import annotations

import sympy
import torch


class ValueScopes:
    """Nested scopes of emitted values, and fresh variable names."""

    def __init__(self) -> None:
        self.scopes: list[dict[tuple[object, ...], str]] = [{}]
        self.counter = 0

    def fresh(self, prefix: str = "tmp") -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def lookup(self, key: tuple[object, ...]) -> str | None:
        for scope in reversed(self.scopes):
            if key in scope:
                return scope[key]
        return None

    def forget_loads(self, storage: str) -> None:
        for scope in self.scopes:
            for key in [k for k in scope if k[0] == "load" and k[1] == storage]:
                del scope[key]


def operand_key(value: object) -> object:
    """A hashable key of an op's operand (a variable name, an index, a dtype, a literal)."""
    if isinstance(value, sympy.Basic):
        return ("expr", str(value))
    if isinstance(value, tuple):
        return tuple(operand_key(v) for v in value)
    if isinstance(value, torch.dtype):
        return str(value)
    return (type(value).__name__, repr(value))
