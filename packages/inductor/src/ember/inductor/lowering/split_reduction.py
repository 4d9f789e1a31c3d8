"""Split reductions: a reduction with few outputs over many elements becomes two.

A GPU kernel gives each output row (or block of rows) one program. Batch norm's backward
sums each of 64 channels over 32 x 112 x 112 elements: 64 programs, each looping over
400 000 elements, leave most of an H100's 132 multiprocessors idle for milliseconds. Split,
the first reduction computes `splits` partial results per output (64 x 32 programs of
12 544 elements each) and a second one reduces the partials. Only reductions whose partial
results combine the same way split (sums, products, maxima, minima); the arg-reductions keep
one pass.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import sympy

from ember.inductor.ir.indexing import Expr

SPLITTABLE = frozenset({"sum", "prod", "max", "min"})
MIN_ELEMENTS = 16384  # reductions smaller than this run fast enough in one pass
TARGET_PROGRAMS = 2048  # outputs x splits to aim for (a few waves on ~132 multiprocessors)
MAX_OUTPUTS = 1024  # with more outputs than this, one pass already fills the GPU
MIN_CHUNK = 1024  # elements each partial reduction covers at least


@dataclass(frozen=True)
class Split:
    """How a reduction splits: the partial reduction's extra output dims (`outer`) and its
    reduction dims (`inner`); `index(outer_vars, inner_vars)` gives the original reduction
    index from theirs."""

    outer: tuple[Expr, ...]
    inner: tuple[Expr, ...]
    lead: int  # leading reduction dims that became outer dims; 0 when one dim was cut

    def index(self, outer: Sequence[Expr], inner: Sequence[Expr]) -> list[Expr]:
        if self.lead:
            return [*outer, *inner]
        return [outer[0] * self.inner[0] + inner[0]]


def plan_split(
    ranges: Sequence[Expr], reduction_ranges: Sequence[Expr], reduction_type: str
) -> Split | None:
    """The split of a reduction worth splitting, else None (see the module docstring)."""
    if reduction_type not in SPLITTABLE or not reduction_ranges:
        return None
    sizes = [*ranges, *reduction_ranges]
    if not all(isinstance(s, (sympy.Integer, int)) for s in sizes):
        return None  # symbolic sizes: the choice would have to hold for every size
    outputs = _product(ranges)
    elements = _product(reduction_ranges)
    if outputs > MAX_OUTPUTS or elements < MIN_ELEMENTS:
        return None
    wanted = max(2, -(-TARGET_PROGRAMS // max(outputs, 1)))
    dims = [int(r) for r in reduction_ranges]
    # leading reduction dims (a batch dim) make clean splits: no index arithmetic
    lead = 0
    for count in range(1, len(dims)):
        splits = _product(dims[:count])
        if elements // splits < MIN_CHUNK or splits > 8 * wanted:
            break
        lead = count
        if splits >= wanted:
            break
    if lead:
        return Split(
            tuple(sympy.Integer(d) for d in dims[:lead]),
            tuple(sympy.Integer(d) for d in dims[lead:]),
            lead,
        )
    if len(dims) != 1:
        return None
    # one reduction dim: cut it into `splits` chunks of equal length
    for splits in _powers_of_two_down_from(wanted):
        if dims[0] % splits == 0 and dims[0] // splits >= MIN_CHUNK:
            return Split((sympy.Integer(splits),), (sympy.Integer(dims[0] // splits),), 0)
    return None


def _product(sizes: Sequence[Expr | int]) -> int:
    total = 1
    for size in sizes:
        total *= int(size)
    return total


def _powers_of_two_down_from(wanted: int) -> list[int]:
    top = 1 << max(1, (wanted - 1).bit_length())
    out = []
    while top >= 2:
        out.append(top)
        top //= 2
    return out
