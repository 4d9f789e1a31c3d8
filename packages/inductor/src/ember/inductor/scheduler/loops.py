"""Loop simplification: drop size-1 loops and merge neighbouring loops that every index in a
body walks together (a contiguous tensor's loops become one), renaming the loops that remain
to canonical variables (`x0, x1, ...` outside, `r0, ...` for reductions).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import sympy

from ember.inductor.ir import body
from ember.inductor.ir.body import BodyValue
from ember.inductor.ir.indexing import Expr, FloorDiv, ModularIndexing, index_var, same


@dataclass(frozen=True)
class Loops:
    """Simplified loops: sizes, and the substitution from the node's variables to them."""

    sizes: tuple[Expr, ...]
    mapping: dict[sympy.Symbol, Expr]


def body_indices(root: BodyValue, extra: Sequence[Expr] = ()) -> list[Expr]:
    """Every index expression a body uses (loads, index_expr, random offsets, indirect
    values)."""
    found: list[Expr] = list(extra)
    for value in body.walk(root):
        if value.op == "load":
            found.append(value.args[1])
        elif value.op == "index_expr":
            found.append(value.args[0])
        elif value.op == "random":
            found.append(value.args[1])
    return found


def simplify_loops(
    variables: Sequence[sympy.Symbol],
    sizes: Sequence[Expr],
    indices: Sequence[Expr],
    prefix: str,
    reorder: bool = False,
) -> Loops:
    """`reorder`: the loop that most accesses walk with stride 1 becomes the innermost (see
    `_innermost_last`)."""
    mapping: dict[sympy.Symbol, Expr] = {}
    kept: list[tuple[sympy.Symbol, Expr]] = []
    for variable, size in zip(variables, sizes):
        if size == 1:
            mapping[variable] = sympy.S.Zero
        else:
            kept.append((variable, size))
    exprs = [sympy.expand(e.xreplace(mapping)) if mapping else e for e in indices]
    if reorder:
        kept = _innermost_last(kept, exprs)
    position = len(kept) - 2
    while position >= 0:
        (outer, outer_size), (inner, inner_size) = kept[position], kept[position + 1]
        if all(_mergeable(e, outer, inner, inner_size) for e in exprs):
            mapping[outer] = sympy.S.Zero
            exprs = [sympy.expand(e.xreplace({outer: 0})) for e in exprs]
            kept[position : position + 2] = [(inner, outer_size * inner_size)]
        position -= 1
    for k, (variable, _) in enumerate(kept):
        mapping[variable] = index_var(prefix, k)
    return Loops(tuple(size for _, size in kept), mapping)


def _innermost_last(
    kept: list[tuple[sympy.Symbol, Expr]], exprs: Sequence[Expr]
) -> list[tuple[sympy.Symbol, Expr]]:
    """The loops with the one that the most index expressions (the store's and the loads')
    walk with stride 1 moved innermost, when it beats the current innermost loop. Only
    expressions over every loop count (a broadcast vector stays in cache whatever the order).
    A cast of a transposed weight into its padded buffer stored and loaded 768 elements apart
    per lane (0.95 ms for GPT-2's LM-head weight on the H100, where torch.compile's cast takes
    0.09 ms); Llama's log-softmax backward, written transposed for the LM head's weight
    gradient, took 8.4 ms. Ties keep the order (a pure transpose stores contiguously)."""
    if len(kept) < 2:
        return kept
    variables = {variable for variable, _ in kept}
    full = [e for e in exprs if variables <= e.free_symbols]

    def unit_strides(variable: sympy.Symbol) -> int:
        return sum(any(_unit(t, variable) for t in sympy.Add.make_args(e)) for e in full)

    scores = [unit_strides(variable) for variable, _ in kept]
    best = max(range(len(kept)), key=lambda k: (scores[k], k))
    if scores[best] <= scores[-1]:
        return kept
    return [*kept[:best], *kept[best + 1 :], kept[best]]


def _unit(term: Expr, variable: sympy.Symbol) -> bool:
    """Whether `term` steps by 1 when `variable` does (`v`, `v // 1`, `v % m`)."""
    if term == variable:
        return True
    if isinstance(term, (FloorDiv, ModularIndexing)):
        return term.args[0] == variable and term.args[1] == 1
    return False


def _mergeable(expr: Expr, outer: sympy.Symbol, inner: sympy.Symbol, inner_size: Expr) -> bool:
    """Whether `expr` reads `outer` and `inner` only as `c * (outer * inner_size + inner)`."""
    outer_coeff: Expr = sympy.S.Zero
    inner_coeff: Expr = sympy.S.Zero
    for term in sympy.Add.make_args(expr):
        symbols = term.free_symbols
        if outer in symbols:
            coeff = term / outer
            if outer in coeff.free_symbols or inner in coeff.free_symbols or not _plain(coeff):
                return False
            outer_coeff += coeff
        elif inner in symbols:
            coeff = term / inner
            if inner in coeff.free_symbols or not _plain(coeff):
                return False
            inner_coeff += coeff
    return same(outer_coeff, inner_coeff * inner_size)


def _plain(coeff: Expr) -> bool:
    """A coefficient made of sizes only (no loop variables, no floor/mod functions)."""
    return not coeff.atoms(sympy.Function) and not any(
        str(s)[0] in "xr" and str(s)[1:].isdigit() for s in coeff.free_symbols
    )
