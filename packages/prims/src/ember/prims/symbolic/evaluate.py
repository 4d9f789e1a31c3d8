"""Concrete evaluation of size expressions, and checking a Graph's guards against inputs.

Symbols are matched by name, so expressions read back from a serialized Graph evaluate the
same as the ones the shape environment built. The interpreter uses `first_failing_guard` to
reject inputs whose sizes break the assumptions a Graph was traced under.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import sympy

from ember.prims.graph import ShapeGuard
from ember.prims.specs import SymbolInfo, symbol

Number = int | float | bool


def evaluate_expr(expr: sympy.Basic | Number, values: Mapping[str, int]) -> Number:
    """The value of `expr` with each symbol replaced by `values[name]`."""
    if isinstance(expr, (bool, int, float)):
        return expr
    mapping = {}
    for sym in expr.free_symbols:
        name = str(sym)
        if name not in values:
            raise KeyError(f"no value for size symbol {name} in {expr}")
        mapping[sym] = sympy.Integer(values[name])
    return as_python(expr.xreplace(mapping), expr)


def as_python(value: sympy.Basic, expr: sympy.Basic | None = None) -> Number:
    """A sympy constant (number or boolean) as the Python value it stands for."""
    if value is sympy.true or value is sympy.false:
        return bool(value)
    if isinstance(value, sympy.Integer):
        return int(value)
    if value.is_Number:
        return float(value)
    if isinstance(value, sympy.Basic) and value.is_Boolean:
        # A relational over numbers that sympy left unevaluated (rare, e.g. with nan).
        return bool(value.simplify())
    shown = expr if expr is not None else value
    raise ValueError(f"{shown} does not evaluate to a number (got {value})")


def first_failing_guard(
    guards: Sequence[ShapeGuard],
    values: Mapping[str, int],
    symbols: Mapping[str, SymbolInfo] | None = None,
) -> ShapeGuard | None:
    """The first guard (or symbol range, checked first) that `values` break, or None.

    `values` maps symbol names to the concrete sizes of the inputs at hand. A broken range
    comes back as a ShapeGuard with no source whose expression is the bound that failed.
    """
    for name, info in (symbols or {}).items():
        if name not in values:
            continue
        value = values[name]
        if value < info.lower:
            return ShapeGuard(sympy.Ge(symbol(name), info.lower))
        if info.upper is not None and value > info.upper:
            return ShapeGuard(sympy.Le(symbol(name), info.upper))
    for guard in guards:
        if not evaluate_expr(guard.expr, values):
            return guard
    return None
