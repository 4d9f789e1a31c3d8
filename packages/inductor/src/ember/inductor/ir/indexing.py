"""Index arithmetic over symbolic loop variables: the variables, floor division and modular
indexing as sympy functions that simplify what they can prove, and helpers that turn a
multi-dimensional index into a flat offset and back.

Generated code divides integers truncating toward zero (C++ `/` and `%`, Triton `//` and
`%`), which agrees with floor division only on non-negative operands. Every index lowering
builds is non-negative wherever it is read unmasked; a rewrite may change a division's
operand only where the new one stays provably non-negative (dropping `+ 16*i` from
`(16*i + 3*j - 54) % 12` is exact in floor arithmetic but makes C's remainder negative: a
rolled window read before its buffer).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeAlias

import sympy

Expr: TypeAlias = sympy.Expr


def index_var(prefix: str, position: int) -> sympy.Symbol:
    """A loop variable (`x0`, `r1`): integer and non-negative, so sympy can simplify with it."""
    return sympy.Symbol(f"{prefix}{position}", integer=True, nonnegative=True)


def as_expr(size: int | Expr) -> Expr:
    return sympy.Integer(size) if isinstance(size, int) else size


class FloorDiv(sympy.Function):
    """`a // b` for non-negative integer `a` and positive integer `b`."""

    is_integer = True

    @classmethod
    def eval(cls, base: Expr, divisor: Expr) -> Expr | None:
        if divisor == 1:
            return base
        if base.is_Integer and divisor.is_Integer:
            return sympy.Integer(int(base) // int(divisor))
        if base == 0:
            return sympy.Integer(0)
        # (a*d + b) // d == a + b // d for an exact multiple term (b >= 0: see the module)
        if isinstance(base, sympy.Add):
            quotient = [term for term in base.args if _divides(divisor, term)]
            rest = [term for term in base.args if not _divides(divisor, term)]
            if quotient and nonnegative(sympy.Add(*rest)):
                return sympy.Add(*[t / divisor for t in quotient]) + FloorDiv(
                    sympy.Add(*rest), divisor
                )
        if _divides(divisor, base):
            return base / divisor
        return None


class ModularIndexing(sympy.Function):
    """`(a // b) % c` for non-negative integers: one dimension of a flat index."""

    is_integer = True

    @classmethod
    def eval(cls, base: Expr, divisor: Expr, modulus: Expr) -> Expr | None:
        if modulus == 1:
            return sympy.Integer(0)
        if base.is_Integer and divisor.is_Integer and modulus.is_Integer:
            return sympy.Integer((int(base) // int(divisor)) % int(modulus))
        if base == 0:
            return sympy.Integer(0)
        if isinstance(base, sympy.Add):
            # terms that are multiples of divisor*modulus do not change the result, as long
            # as what is left stays non-negative (see the module)
            kept = [t for t in base.args if not _divides(divisor * modulus, t)]
            if len(kept) < len(base.args) and nonnegative(sympy.Add(*kept)):
                return ModularIndexing(sympy.Add(*kept), divisor, modulus)
        return None


def nonnegative(expr: Expr) -> bool:
    """Whether an index expression is provably >= 0: a sum of non-negative multiples of
    non-negative loop variables and sizes, and of divisions and remainders of such sums."""
    for term in sympy.Add.make_args(expr):
        coefficient, rest = term.as_coeff_Mul()
        if coefficient < 0:
            return False
        for factor in sympy.Mul.make_args(rest):
            if factor == 1 or factor.is_nonnegative:
                continue
            if isinstance(factor, (FloorDiv, ModularIndexing)) and nonnegative(factor.args[0]):
                continue
            return False
    return True


def _divides(divisor: Expr, term: Expr) -> bool:
    quotient = sympy.simplify(term / divisor) if not divisor.is_Integer else term / divisor
    if quotient.is_integer:
        return True
    coeff, _ = term.as_coeff_Mul()
    return bool(divisor.is_Integer and coeff.is_Integer and int(coeff) % int(divisor) == 0)


def product(sizes: Sequence[Expr]) -> Expr:
    result: Expr = sympy.Integer(1)
    for size in sizes:
        result = result * size
    return result


def contiguous_strides(sizes: Sequence[Expr]) -> tuple[Expr, ...]:
    strides: list[Expr] = []
    running: Expr = sympy.Integer(1)
    for size in reversed(sizes):
        strides.append(running)
        running = running * size
    return tuple(reversed(strides))


def flat_index(index: Sequence[Expr], strides: Sequence[Expr], offset: Expr = sympy.S.Zero) -> Expr:
    return sympy.expand(offset + sum((i * s for i, s in zip(index, strides)), sympy.S.Zero))


def unflatten(flat: Expr, sizes: Sequence[Expr]) -> list[Expr]:
    """The multi-dimensional index of `flat` in a contiguous tensor of `sizes`."""
    if len(sizes) == 1:
        return [flat]
    if any(size == 0 for size in sizes):  # no elements: any index is right
        return [sympy.Integer(0)] * len(sizes)
    strides = contiguous_strides(sizes)
    result: list[Expr] = []
    for position, (size, stride) in enumerate(zip(sizes, strides)):
        if size == 1:
            result.append(sympy.Integer(0))
        elif position == 0:
            result.append(FloorDiv(flat, stride))
        else:
            result.append(ModularIndexing(flat, stride, size))
    return result


def same(a: Expr, b: Expr) -> bool:
    """Whether two sizes are provably equal."""
    return bool(a == b or sympy.expand(a - b) == 0)


def simplify_with_ranges(expr: Expr, ranges: dict[sympy.Symbol, Expr]) -> Expr:
    """`expr` with floor divisions and modular indexing removed where the loop ranges prove
    them exact (`(x1 + 512*x0) // 512` is `x0` when `x1 < 512`)."""
    if not expr.has(FloorDiv, ModularIndexing):
        return expr

    def bound(e: Expr) -> tuple[int, int] | None:
        """Inclusive integer bounds of a linear expression over loop variables."""
        low = high = 0
        for term in sympy.Add.make_args(sympy.expand(e)):
            coeff, rest = term.as_coeff_Mul()
            if rest == 1:
                if not coeff.is_Integer:
                    return None
                low, high = low + int(coeff), high + int(coeff)
                continue
            if not coeff.is_Integer:
                return None
            inner = factor(rest)
            if inner is None:
                return None
            ends = (int(coeff) * inner[0], int(coeff) * inner[1])
            low, high = low + min(ends), high + max(ends)
        return low, high

    def factor(e: Expr) -> tuple[int, int] | None:
        """Inclusive bounds of a loop variable, a remainder or a quotient."""
        if isinstance(e, sympy.Symbol):
            size = ranges.get(e)
            return (0, int(size) - 1) if size is not None and size.is_Integer else None
        if isinstance(e, ModularIndexing) and e.args[2].is_Integer:
            return 0, int(e.args[2]) - 1
        if isinstance(e, FloorDiv) and e.args[1].is_Integer and int(e.args[1]) > 0:
            limits = bound(e.args[0])
            if limits is None or limits[0] < 0:
                return None
            return limits[0] // int(e.args[1]), limits[1] // int(e.args[1])
        return None

    def exact(base: Expr, d: int) -> Expr | None:
        """`base // d` without a floor when the ranges prove it exact, else None."""
        whole: list[Expr] = []
        rest: list[Expr] = []
        for term in sympy.Add.make_args(sympy.expand(base)):
            coeff, _ = term.as_coeff_Mul()
            (whole if coeff.is_Integer and int(coeff) % d == 0 else rest).append(term)
        limits = bound(sympy.Add(*rest))
        if limits is not None and limits[0] >= 0 and limits[1] < d:
            return sympy.expand(sympy.Add(*whole) / d)
        return None

    def floor_div(base: Expr, divisor: Expr) -> Expr:
        if not divisor.is_Integer:
            return FloorDiv(base, divisor)
        d = int(divisor)
        quotient = exact(base, d)
        if quotient is not None:
            return quotient
        # (a // c) // (d / c) == a // d: divide by a coefficient first when that is exact
        for term in sympy.Add.make_args(sympy.expand(base)):
            coeff, _ = term.as_coeff_Mul()
            c = int(coeff) if coeff.is_Integer else 0
            if 1 < c < d and d % c == 0:
                partial = exact(base, c)
                if partial is not None:
                    return floor_div(partial, sympy.Integer(d // c))
        return FloorDiv(base, divisor)

    def modular(base: Expr, divisor: Expr, modulus: Expr) -> Expr:
        quotient = floor_div(base, divisor)
        if quotient.has(FloorDiv) or not modulus.is_Integer:
            return ModularIndexing(base, divisor, modulus)
        limits = bound(quotient)
        if limits is not None and limits[0] >= 0 and limits[1] < int(modulus):
            return quotient
        return ModularIndexing(quotient, sympy.S.One, modulus)

    # a replacement is not visited again: `(r0 % m) % m` needs a second round
    for _ in range(4):
        simplified = _recombine(
            sympy.expand(
                expr.replace(
                    lambda e: isinstance(e, (FloorDiv, ModularIndexing)),
                    lambda e: floor_div(*e.args) if isinstance(e, FloorDiv) else modular(*e.args),
                )
            )
        )
        if simplified == expr or not simplified.has(FloorDiv, ModularIndexing):
            return simplified
        expr = simplified
    return expr


def _recombine(expr: Expr) -> Expr:
    """`c*(a % m) + c*m*(a // m)` is `c*a`."""
    terms = list(sympy.Add.make_args(expr))
    for position, term in enumerate(terms):
        coeff, rest = term.as_coeff_Mul()
        if not isinstance(rest, ModularIndexing) or rest.args[1] != 1:
            continue
        value, modulus = rest.args[0], rest.args[2]
        partner = coeff * modulus * FloorDiv(value, modulus)
        for other, candidate in enumerate(terms):
            if other != position and sympy.expand(candidate - partner) == 0:
                remaining = [t for k, t in enumerate(terms) if k not in (position, other)]
                return _recombine(sympy.expand(sympy.Add(*remaining) + coeff * value))
    return expr
