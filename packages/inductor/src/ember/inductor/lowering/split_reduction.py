"""Split reductions: a reduction with few programs' worth of outputs becomes two.

A GPU kernel gives each output row (or block of rows) one program. Batch norm's backward
sums each of 64 channels over 32 x 112 x 112 elements: 64 programs, each looping over
400 000 elements, leave most of an H100's 132 multiprocessors idle for milliseconds. Split,
the first reduction computes `splits` partial results per output (64 x 32 programs of
12 544 elements each) and a second one reduces the partials. Only reductions whose partial
results combine the same way split (sums, products, maxima, minima); the arg-reductions keep
one pass.

A *column* reduction (its loads walk memory along the outputs: a bias or norm weight
gradient, summed over 8192 tokens for each of 1024 features) gives one program to 64
neighbouring outputs, so 1024 outputs make 16 programs: Llama's RMSNorm weight gradients took
0.24 ms each on the H100. It splits its rows into chunks until about `COLUMN_PROGRAMS`
programs run, and lays its partial results out chunk-major (`[chunks, outputs]`), so that both
halves load and store contiguously along the outputs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import sympy

from ember.inductor.ir import body
from ember.inductor.ir.indexing import Expr
from ember.inductor.ir.load_direction import load_directions

# welford_m2's partials merge by Chan's formula with the partial sums beside them
# (`LoweringContext._split_welford`), the others by the same reduction
SPLITTABLE = frozenset({"sum", "prod", "max", "min", "welford_m2"})
MIN_ELEMENTS = 16384  # reductions smaller than this run fast enough in one pass
TARGET_PROGRAMS = 2048  # outputs x splits to aim for (a few waves on ~132 multiprocessors)
MAX_OUTPUTS = 1024  # with more outputs than this, one pass already fills the GPU
MIN_CHUNK = 1024  # elements each partial reduction covers at least
COLUMN_BLOCK = 64  # outputs one program of a column reduction covers (codegen's XBLOCK)
COLUMN_PROGRAMS = 1024  # about 8 programs of 8 warps resident on each of ~132 multiprocessors
MIN_COLUMN_ROWS = 64  # rows each partial column reduction covers at least (two r-blocks)
# smaller column reductions run fast enough in one pass; ResNet-50's last stage (512
# channels over 32 x 7 x 7 rows: 8 programs of 49 steps, 27 us on the H100) did not
MIN_COLUMN_ELEMENTS = 1 << 18


@dataclass(frozen=True)
class Split:
    """How a reduction splits: the partial reduction's extra output dims (`outer`) and its
    reduction dims (`inner`); `index(outer_vars, inner_vars)` gives the original reduction
    index from theirs. The first `lead` reduction dims become outer dims whole; the next one
    is cut into `cut` chunks (the last outer dim) when `cut` > 1. `chunk_major`: the partial
    results are laid out `[*outer, *outputs]` (column reductions), else `[*outputs, *outer]`."""

    outer: tuple[Expr, ...]
    inner: tuple[Expr, ...]
    lead: int
    cut: int = 1
    chunk_major: bool = False

    def index(self, outer: Sequence[Expr], inner: Sequence[Expr]) -> list[Expr]:
        if self.cut == 1:
            return [*outer, *inner]
        chunk = outer[self.lead] * self.inner[0] + inner[0]
        return [*outer[: self.lead], chunk, *inner[1:]]


def plan_split(
    ranges: Sequence[Expr],
    reduction_ranges: Sequence[Expr],
    reduction_type: str,
    column: bool = False,
) -> Split | None:
    """The split of a reduction worth splitting, else None (see the module docstring).
    `column`: the reduction reads memory contiguously along its outputs (`reads_along_outputs`)."""
    if reduction_type not in SPLITTABLE or not reduction_ranges:
        return None
    sizes = [*ranges, *reduction_ranges]
    if not all(isinstance(s, (sympy.Integer, int)) for s in sizes):
        return None  # symbolic sizes: the choice would have to hold for every size
    outputs = _product(ranges)
    dims = [int(r) for r in reduction_ranges]
    if column:
        return _column_split(outputs, dims)
    elements = _product(reduction_ranges)
    if outputs > MAX_OUTPUTS or elements < MIN_ELEMENTS:
        return None
    wanted = max(2, -(-TARGET_PROGRAMS // max(outputs, 1)))
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
            chunk = sympy.Integer(dims[0] // splits)
            return Split((sympy.Integer(splits),), (chunk,), 0, cut=splits)
    return None


def _column_split(outputs: int, dims: list[int]) -> Split | None:
    """Whole leading reduction dims, then a cut of the next one, to about `COLUMN_PROGRAMS`
    programs in all, each partial covering at least `MIN_COLUMN_ROWS` rows."""
    elements = _product(dims)
    if outputs * elements < MIN_COLUMN_ELEMENTS:
        return None
    wanted = min(-(-COLUMN_PROGRAMS // -(-outputs // COLUMN_BLOCK)), elements // MIN_COLUMN_ROWS)
    if wanted < 2:
        return None
    lead, splits = 0, 1
    while splits * dims[lead] <= wanted:  # stops before the last dim: wanted < elements
        splits *= dims[lead]
        lead += 1
    cut = next(c for c in range(wanted // splits, 0, -1) if dims[lead] % c == 0)
    if splits * cut < 2:
        return None
    outer = [*dims[:lead], *([cut] if cut > 1 else [])]
    inner = [dims[lead] // cut, *dims[lead + 1 :]]
    return Split(
        tuple(sympy.Integer(d) for d in outer),
        tuple(sympy.Integer(d) for d in inner),
        lead,
        cut=cut,
        chunk_major=True,
    )


def reads_along_outputs(
    tree: body.BodyValue,
    outputs: Sequence[sympy.Symbol],
    reduced: Sequence[sympy.Symbol],
    ranges: dict[sympy.Symbol, Expr] | None = None,
) -> bool:
    """Whether more of the loads of a reduction's body walk memory with stride 1 along its
    innermost output dim than along its innermost reduced dim (a column reduction).
    `ranges`: each loop variable's size, to see through a view's index arithmetic (GPT-2's
    bias gradients, a sum over a [4096, 768] view, counted as neither and ran unsplit: 12
    programs, 45 us each, 25 a step on the H100)."""
    along_outputs, along_reduced = load_directions([tree], outputs, reduced, ranges)
    return along_outputs > along_reduced


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
