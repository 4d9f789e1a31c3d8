"""Which way a reduction's loads walk memory: along its outputs or along its reduced dims.

A reduction whose loads mostly have stride 1 along the innermost output dim is a *column*
reduction (a bias gradient summed over tokens); one whose loads have stride 1 along the
innermost reduced dim is a *row* reduction (a softmax's sum). Both the split of long
reductions and the Triton tiling choose by this vote.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import sympy

from ember.inductor.ir import body
from ember.inductor.ir.indexing import Expr, simplify_with_ranges


def load_directions(
    trees: Iterable[body.BodyValue],
    outputs: Sequence[sympy.Symbol],
    reduced: Sequence[sympy.Symbol],
    ranges: dict[sympy.Symbol, Expr] | None = None,
) -> tuple[int, int]:
    """(loads with stride 1 along the innermost output dim, loads with stride 1 along the
    innermost reduced dim) over `trees`. Only loads that vary along both count: a value read
    once per row beside a matrix (a log-softmax's maximum, a target) does not decide.
    `ranges` (each loop variable's size) first removes the divisions and remainders a view
    leaves in an index: a [4096, 768] view of a [8, 512, 768] gradient is read at
    `768*((768*r0 + x0)//768 % 512) + (768*r0 + x0) % 768 + ...`, which is `768*r0 + x0`."""
    if not outputs or not reduced:
        return 0, 0
    last_output, last_reduced = outputs[-1], reduced[-1]
    output_set, reduced_set = set(outputs), set(reduced)
    along_outputs = along_reduced = 0
    for tree in trees:
        for load in body.loads(tree):
            index = load.args[1]
            if not isinstance(index, sympy.Expr):
                continue
            symbols = index.free_symbols
            if not (symbols & output_set and symbols & reduced_set):
                continue
            if ranges:
                index = simplify_with_ranges(index, ranges)
            expanded = sympy.expand(index)
            if expanded.coeff(last_reduced) == 1:
                along_reduced += 1
            elif expanded.coeff(last_output) == 1:
                along_outputs += 1
    return along_outputs, along_reduced
