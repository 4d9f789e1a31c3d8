"""Index arithmetic: floor division and modular indexing simplify exactly when ranges prove it."""

from __future__ import annotations

import itertools

import sympy

from ember.inductor.ir.indexing import (
    FloorDiv,
    ModularIndexing,
    index_var,
    simplify_with_ranges,
    unflatten,
)

x0, x1 = index_var("x", 0), index_var("x", 1)


def _values(expr: sympy.Expr, ranges: dict[sympy.Symbol, int]) -> list[int]:
    symbols = list(ranges)
    return [
        int(sympy.sympify(sympy.sympify(expr).xreplace(dict(zip(symbols, point)))).doit())
        for point in itertools.product(*(range(n) for n in ranges.values()))
    ]


def test_reshape_round_trip_simplifies_to_the_flat_index() -> None:
    ranges = {x0: 256, x1: 512}
    # a (4, 64, 512) tensor read through a (256, 512) view: flat index x1 + 512*x0
    flat = x1 + 512 * x0
    parts = unflatten(flat, [sympy.Integer(4), sympy.Integer(64), sympy.Integer(512)])
    index = 32768 * parts[0] + 512 * parts[1] + parts[2]
    simplified = simplify_with_ranges(index, {k: sympy.Integer(v) for k, v in ranges.items()})
    assert simplified == flat


def test_simplification_keeps_values() -> None:
    ranges = {x0: 6, x1: 5}
    sizes = {k: sympy.Integer(v) for k, v in ranges.items()}
    for expr in (
        FloorDiv(x1 + 5 * x0, 5),
        ModularIndexing(x1 + 5 * x0, 1, 5),
        ModularIndexing(x1 + 5 * x0, 5, 3),
        FloorDiv(x1 + 5 * x0, 10),
        FloorDiv(x1 + 5 * x0, 3),
    ):
        assert _values(simplify_with_ranges(expr, sizes), ranges) == _values(expr, ranges)


def test_division_that_ranges_cannot_prove_stays() -> None:
    expr = FloorDiv(x1 + 5 * x0, 3)
    assert simplify_with_ranges(expr, {x0: sympy.Integer(6), x1: sympy.Integer(5)}).has(FloorDiv)
