"""Index ranges of a loop's loads and stores, checked against the memory they touch.

Every loop variable runs over `[0, size)`; a load under a `masked` op runs only where its
conditions hold (a cat's or a pad's shifted index is out of range elsewhere, by design). The
range of each index is bounded by interval arithmetic (exact for the linear indices most
loops have); where that cannot prove an access in bounds, the index is evaluated at every
point of the loops it reads (when they are few enough), with integer division and remainder
truncating as the generated C++ and Triton code does. An access proven to leave its storage
is a compiler bug that would read or write other memory (on a GPU: "an illegal memory access
was encountered"), so it is reported before any code runs.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

import sympy
import torch

from ember.inductor.ir.body import BodyValue
from ember.inductor.ir.indexing import Expr, FloorDiv, ModularIndexing
from ember.inductor.ir.program import Storage

Interval = tuple[int, int]  # inclusive
# Loop points evaluated one by one when intervals cannot prove an access in bounds.
ENUMERATION_LIMIT = 1 << 21


@dataclass(frozen=True)
class OutOfBounds:
    """An access whose index reaches outside its storage at some point of its loops."""

    storage: str
    kind: str  # "load" or "store"
    index: Expr
    reached: Interval  # the smallest and largest index the loops reach
    extent: int  # elements the storage holds

    def describe(self) -> str:
        low, high = self.reached
        return (
            f"{self.kind} of {self.storage}[{self.index}] reaches elements {low}..{high} "
            f"of a storage of {self.extent}"
        )


@dataclass(frozen=True)
class Access:
    """One load or store: its storage, index and the `masked` conditions around it."""

    storage: str
    kind: str
    index: Expr
    guards: tuple[BodyValue, ...] = ()


def storage_extent(storage: Storage) -> int | None:
    """Elements a storage holds from the pointer kernels get (None: a symbolic size)."""
    layout = storage.layout or storage.declared
    if layout is None:
        return None
    extent = 1
    for size, stride in zip(layout.size, layout.stride):
        if not (size.is_Integer and stride.is_Integer):
            return None
        if int(size) == 0:
            return 0
        extent += (int(size) - 1) * int(stride)
    return extent + int(layout.offset) if layout.offset.is_Integer else None


def accesses(trees: Sequence[BodyValue], stores: Sequence[tuple[str, Expr]] = ()) -> list[Access]:
    """Every load in `trees` (with the conditions that guard it) and the given stores."""
    found: dict[tuple[int, tuple[int, ...]], Access] = {}
    seen: set[tuple[int, tuple[int, ...]]] = set()

    def visit(value: BodyValue, guards: tuple[BodyValue, ...]) -> None:
        key = (id(value), tuple(id(g) for g in guards))
        if key in seen:
            return
        seen.add(key)
        if value.op == "masked":
            mask, inner, _ = value.args
            assert isinstance(mask, BodyValue) and isinstance(inner, BodyValue)
            visit(mask, guards)
            visit(inner, (*guards, mask))
            return
        if value.op == "load":
            storage, index, _ = value.args
            assert isinstance(index, sympy.Expr)
            found[key] = Access(str(storage), "load", index, guards)
        for child in value.children():
            visit(child, guards)

    for tree in trees:
        visit(tree, ())
    return [*found.values(), *(Access(s, "store", index) for s, index in stores)]


def out_of_bounds(
    access_list: Sequence[Access],
    ranges: Mapping[sympy.Symbol, Expr],
    extents: Mapping[str, int | None],
) -> list[OutOfBounds]:
    """The accesses proven to leave their storage when every variable `v` of `ranges` runs
    over `[0, ranges[v])`. Accesses through symbols the loops do not bind (indirect indices,
    symbolic sizes) or with conditions this check cannot read are not judged."""
    box: dict[sympy.Symbol, Interval] = {}
    for variable, size in ranges.items():
        if not size.is_Integer or int(size) <= 0:
            return []  # symbolic sizes, or no iterations at all
        box[variable] = (0, int(size) - 1)
    found: list[OutOfBounds] = []
    for access in access_list:
        extent = extents.get(access.storage)
        if extent is None:
            continue
        reached = _reached(access, box, extent)
        if reached is not None and (reached[0] < 0 or reached[1] >= extent):
            found.append(OutOfBounds(access.storage, access.kind, access.index, reached, extent))
    return found


def _reached(access: Access, box: dict[sympy.Symbol, Interval], extent: int) -> Interval | None:
    """The index range an access reaches, when it can be known (None: through symbols the
    loops do not bind, under conditions this check cannot read, or at no point)."""
    if not access.index.free_symbols <= set(box):
        return None
    constraints = _constraints(access.guards)
    if constraints is None:
        return None
    narrowed = _narrow(box, constraints)
    if narrowed is None:
        return None  # the guards hold nowhere
    bound = index_range(access.index, narrowed)
    if bound is not None and bound[0] >= 0 and bound[1] < extent:
        return bound  # in bounds (the interval holds every reached index)
    exact = _enumerate(access.index, constraints, narrowed)
    if exact is not None:
        return exact
    if bound is not None and not constraints and _linear(access.index):
        return bound  # each variable once, to the first power: the interval is reached
    return None


def _linear(expr: Expr) -> bool:
    seen: set[sympy.Symbol] = set()
    for term in sympy.Add.make_args(expr):
        coefficient, rest = term.as_coeff_Mul()
        if rest == 1:
            continue
        if not isinstance(rest, sympy.Symbol) or rest in seen or not coefficient.is_Integer:
            return False
        seen.add(rest)
    return True


def index_range(expr: Expr, box: Mapping[sympy.Symbol, Interval]) -> Interval | None:
    """Inclusive bounds of an integer index expression over a box of variables."""
    if expr.is_Integer:
        return int(expr), int(expr)
    if isinstance(expr, sympy.Symbol):
        return box.get(expr)
    if isinstance(expr, sympy.Add):
        low = high = 0
        for term in expr.args:
            bound = index_range(term, box)
            if bound is None:
                return None
            low, high = low + bound[0], high + bound[1]
        return low, high
    if isinstance(expr, sympy.Mul):
        result: Interval = (1, 1)
        for factor in expr.args:
            bound = index_range(factor, box)
            if bound is None:
                return None
            corners = [a * b for a in result for b in bound]
            result = (min(corners), max(corners))
        return result
    if isinstance(expr, FloorDiv):
        base, divisor = (index_range(a, box) for a in expr.args)
        if base is None or divisor is None or divisor[0] != divisor[1] or divisor[0] <= 0:
            return None
        return _truncate(base[0], divisor[0]), _truncate(base[1], divisor[0])
    if isinstance(expr, ModularIndexing):
        base, divisor, modulus = (index_range(a, box) for a in expr.args)
        if base is None or divisor is None or modulus is None:
            return None
        if divisor[0] != divisor[1] or modulus[0] != modulus[1] or divisor[0] <= 0:
            return None
        low, high = _truncate(base[0], divisor[0]), _truncate(base[1], divisor[0])
        return _remainder_range(low, high, modulus[0])
    if isinstance(expr, (sympy.Min, sympy.Max)):
        bounds = [index_range(a, box) for a in expr.args]
        if any(b is None for b in bounds):
            return None
        pick = min if isinstance(expr, sympy.Min) else max
        return pick(b[0] for b in bounds if b), pick(b[1] for b in bounds if b)
    return None


def _truncate(a: int, d: int) -> int:
    """`a / d` rounded toward zero, as C and Triton divide integers."""
    return a // d if a >= 0 else -((-a) // d)


def _remainder_range(low: int, high: int, modulus: int) -> Interval:
    """The range of `q % modulus` (C's remainder: the sign of `q`) for `q` in [low, high]."""
    if modulus <= 0:
        return low, high
    if low >= 0:
        if high - low + 1 >= modulus or low % modulus > high % modulus:
            return 0, modulus - 1
        return low % modulus, high % modulus
    if high <= 0:
        negative = _remainder_range(-high, -low, modulus)
        return -negative[1], -negative[0]
    return -(modulus - 1), modulus - 1


# ---- conditions of masked loads ------------------------------------------------------------

Constraint = Expr  # holds where the expression is >= 0


def _constraints(guards: Sequence[BodyValue]) -> list[Constraint] | None:
    """The guards as linear constraints `e >= 0`, or None when one cannot be read."""
    found: list[Constraint] = []
    for guard in guards:
        read = _condition(guard)
        if read is None:
            return None
        found.extend(read)
    return found


def _condition(value: BodyValue) -> list[Constraint] | None:
    if value.op == "logical_and":
        parts = [_condition(arg) for arg in value.args if isinstance(arg, BodyValue)]
        if len(parts) != 2 or any(p is None for p in parts):
            return None
        return [c for part in parts if part is not None for c in part]
    if value.op not in ("ge", "gt", "le", "lt"):
        return None
    left, right = (_index_value(arg) for arg in value.args)
    if left is None or right is None:
        return None
    difference = sympy.expand(left - right)
    return [
        {"ge": difference, "gt": difference - 1, "le": -difference, "lt": -difference - 1}[value.op]
    ]


def _index_value(value: object) -> Expr | None:
    """The integer index a body value holds (an index expression or integer constant)."""
    if not isinstance(value, BodyValue):
        return None
    if value.op == "to_dtype":
        source = value.args[0]
        dtype = value.args[1]
        if isinstance(dtype, torch.dtype) and dtype.is_floating_point:
            return None
        return _index_value(source)
    if value.op == "index_expr" and isinstance(value.args[0], sympy.Expr):
        return value.args[0]
    if value.op == "constant" and isinstance(value.args[0], int):
        return sympy.Integer(value.args[0])
    return None


def _narrow(
    box: dict[sympy.Symbol, Interval], constraints: Sequence[Constraint]
) -> dict[sympy.Symbol, Interval] | None:
    """The box shrunk by constraints `e >= 0` linear in a variable (a sound bound: every
    point where they hold stays inside); None when they hold nowhere."""
    narrowed = dict(box)
    for _ in range(2):
        for constraint in constraints:
            for term in sympy.Add.make_args(constraint):
                coefficient, variable = term.as_coeff_Mul()
                if variable not in narrowed or not coefficient.is_Integer:
                    continue
                rest = index_range(constraint - term, narrowed)
                if rest is None:
                    continue
                c = int(coefficient)
                low, high = narrowed[variable]
                if c > 0:  # c*v >= -rest >= -rest_high
                    low = max(low, -(rest[1] // c))
                else:  # -|c|*v >= -rest: v <= rest_high / |c|
                    high = min(high, rest[1] // -c)
                if low > high:
                    return None
                narrowed[variable] = (low, high)
    return narrowed


# ---- exact evaluation ----------------------------------------------------------------------


def _enumerate(
    index: Expr, constraints: Sequence[Constraint], box: Mapping[sympy.Symbol, Interval]
) -> Interval | None:
    """The exact index range at the loop points where every constraint holds (None: too many
    points, or none).

    The index's terms and the constraints are split into groups that share no variable:
    the points where the constraints hold are then the product of each group's, and the
    index's extremes the sums of each group's, so each group is evaluated on its own (a
    window partition's `x0 % 7 + 7 * (x1 % 8)` takes 7 + 8 points, not 56)."""
    low = high = 0
    for terms, group_constraints in _independent_groups(index, constraints):
        reached = _enumerate_group(sympy.Add(*terms), group_constraints, box)
        if reached is None:
            return None
        low, high = low + reached[0], high + reached[1]
    return low, high


def _independent_groups(
    index: Expr, constraints: Sequence[Constraint]
) -> list[tuple[list[Expr], list[Constraint]]]:
    """The index's terms and the constraints, grouped so that no two groups share a variable
    (a term or constraint without variables is a group of its own)."""
    parts: list[tuple[set[sympy.Symbol], list[Expr], list[Constraint]]] = []
    items: list[tuple[Expr, bool]] = [(t, True) for t in sympy.Add.make_args(index)]
    items += [(c, False) for c in constraints]
    for item, is_term in items:
        symbols = set(item.free_symbols)
        terms, conditions = ([item], []) if is_term else ([], [item])
        for part in [p for p in parts if symbols and p[0] & symbols]:
            parts.remove(part)
            symbols |= part[0]
            terms += part[1]
            conditions += part[2]
        parts.append((symbols, terms, conditions))
    return [(terms, conditions) for _, terms, conditions in parts]


def _enumerate_group(
    index: Expr, constraints: Sequence[Constraint], box: Mapping[sympy.Symbol, Interval]
) -> Interval | None:
    """`_enumerate` over every point of the variables `index` and `constraints` read."""
    symbols = sorted(index.free_symbols.union(*(c.free_symbols for c in constraints)), key=str)
    if not all(s in box for s in symbols):
        return None
    count = 1
    for symbol in symbols:
        low, high = box[symbol]
        count *= high - low + 1
    if count > ENUMERATION_LIMIT:
        return None
    axes: dict[sympy.Symbol, torch.Tensor] = {}
    for position, symbol in enumerate(symbols):
        low, high = box[symbol]
        shape = [1] * len(symbols)
        shape[position] = high - low + 1
        axes[symbol] = torch.arange(low, high + 1, dtype=torch.int64).view(shape)
    values = _evaluate(index, axes)
    holds = torch.ones_like(values, dtype=torch.bool)
    for constraint in constraints:
        holds = holds & (_evaluate(constraint, axes) >= 0)
    values, holds = torch.broadcast_tensors(values, holds)
    chosen = values[holds]
    if chosen.numel() == 0:
        return None
    return int(chosen.min()), int(chosen.max())


def _evaluate(expr: Expr, axes: Mapping[sympy.Symbol, torch.Tensor]) -> torch.Tensor:
    if expr.is_Integer:
        return torch.tensor(int(expr), dtype=torch.int64)
    if isinstance(expr, sympy.Symbol):
        return axes[expr]
    if isinstance(expr, sympy.Add):
        return _fold(lambda a, b: a + b, (_evaluate(a, axes) for a in expr.args))
    if isinstance(expr, sympy.Mul):
        return _fold(lambda a, b: a * b, (_evaluate(a, axes) for a in expr.args))
    if isinstance(expr, FloorDiv):
        base, divisor = (_evaluate(a, axes) for a in expr.args)
        return torch.div(base, divisor, rounding_mode="trunc")
    if isinstance(expr, ModularIndexing):
        base, divisor, modulus = (_evaluate(a, axes) for a in expr.args)
        return torch.fmod(torch.div(base, divisor, rounding_mode="trunc"), modulus)
    if isinstance(expr, sympy.Min):
        return _fold(torch.minimum, (_evaluate(a, axes) for a in expr.args))
    if isinstance(expr, sympy.Max):
        return _fold(torch.maximum, (_evaluate(a, axes) for a in expr.args))
    raise NotImplementedError(f"index expression {expr}")


def _fold(fn: object, values: Iterator[torch.Tensor]) -> torch.Tensor:
    result = next(values)
    for value in values:
        result = fn(result, value)  # type: ignore[operator]
    return result
