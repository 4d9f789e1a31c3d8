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

from collections.abc import Mapping, Sequence
from typing import TypeAlias

import sympy

from ember.prims.symbolic import ValueRange, bound

Expr: TypeAlias = sympy.Expr


def index_var(prefix: str, position: int) -> sympy.Symbol:
    """A loop variable (`x0`, `r1`): integer and non-negative, so sympy can simplify with it."""
    return sympy.Symbol(f"{prefix}{position}", integer=True, nonnegative=True)


def largest(expr: Expr, ranges: Mapping[str, tuple[int, int | None]]) -> int | None:
    """The largest value `expr` takes with each size symbol in its (lower, upper) range
    (`Program.size_ranges`), by interval arithmetic; None when nothing bounds it."""
    if expr.is_Integer:
        return int(expr)
    symbols = expr.free_symbols
    if not symbols or any(str(s) not in ranges for s in symbols):
        return None
    table = {s: ValueRange.of(*ranges[str(s)]) for s in symbols}
    upper = bound(expr, table).upper
    return int(upper) if upper.is_finite else None


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
    if any(_is_size(s) for s in expr.free_symbols) or any(
        not size.is_Integer for size in ranges.values()
    ):
        return _simplify_over_sizes(expr, ranges)

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
        """`base // d` without a floor when the ranges prove it exact, else None: the terms
        that are not multiples of `d` stay within one multiple of `d` and the next (the
        odd corner of a 2x2 pooling window, `(33 + 2*x3 + 64*x2) // 32` with x3 < 16, is
        `2*x2 + 1`)."""
        whole: list[Expr] = []
        rest: list[Expr] = []
        for term in sympy.Add.make_args(sympy.expand(base)):
            coeff, _ = term.as_coeff_Mul()
            (whole if coeff.is_Integer and int(coeff) % d == 0 else rest).append(term)
        limits = bound(sympy.Add(*rest))
        if limits is not None and limits[0] >= 0 and limits[0] // d == limits[1] // d:
            return sympy.expand(sympy.Add(*whole) / d + limits[0] // d)
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
        m = int(modulus)
        # within one period [k*m, (k+1)*m) the remainder is the quotient less k*m
        if limits is not None and limits[0] >= 0 and limits[0] // m == limits[1] // m:
            return sympy.expand(quotient - (limits[0] // m) * m)
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


def _is_size(symbol: sympy.Basic) -> bool:
    """A Graph's size symbol (`s0`), as opposed to a loop or indirect-index variable."""
    name = str(symbol)
    return name[:1] == "s" and name[1:].isdigit()


def _at_least_zero(expr: Expr) -> bool:
    """Whether `expr`, a polynomial in size symbols, is >= 0 for every size >= 1 (a size of
    0 runs no loop, so no index over it is read): with each size `t + 1`, every coefficient
    of the polynomial in the `t`s is >= 0."""
    expr = sympy.expand(expr)
    if expr.is_Number:
        return bool(expr >= 0)
    symbols = expr.free_symbols
    if not all(_is_size(s) for s in symbols):
        return False
    shifted = sympy.expand(expr.xreplace({s: s + 1 for s in symbols}))
    try:
        coefficients = sympy.Poly(shifted, *sorted(symbols, key=str)).coeffs()
    except sympy.PolynomialError:
        return False
    return all(c >= 0 for c in coefficients)


def _simplify_over_sizes(expr: Expr, ranges: dict[sympy.Symbol, Expr]) -> Expr:
    """`simplify_with_ranges` where loop ranges or divisors are symbolic sizes: bounds are
    polynomials in the size symbols, and a comparison holds when `_at_least_zero` proves it
    (`(x3 + 32*x1 + 128*x2) // (128*s1)` is 0 when x2 < s1, x1 < 4 and x3 < 32)."""

    def bound(e: Expr) -> tuple[Expr, Expr] | None:
        low: Expr = sympy.S.Zero
        high: Expr = sympy.S.Zero
        for term in sympy.Add.make_args(sympy.expand(e)):
            coeff, rest = term.as_coeff_Mul()
            if not coeff.is_Rational:
                return None
            term_low: Expr = sympy.S.One
            term_high: Expr = sympy.S.One
            for item in sympy.Mul.make_args(rest):
                limits = factor(item)
                if limits is None:
                    return None  # every factor's bounds are >= 0: products are monotone
                term_low, term_high = term_low * limits[0], term_high * limits[1]
            if coeff >= 0:
                low, high = low + coeff * term_low, high + coeff * term_high
            else:
                low, high = low + coeff * term_high, high + coeff * term_low
        return sympy.expand(low), sympy.expand(high)

    def factor(e: Expr) -> tuple[Expr, Expr] | None:
        if e == 1:
            return sympy.S.One, sympy.S.One
        if isinstance(e, sympy.Symbol):
            size = ranges.get(e)
            if size is not None:
                return sympy.S.Zero, size - 1
            return (e, e) if _is_size(e) else None
        if isinstance(e, sympy.Pow) and _is_size(e.base) and e.exp.is_Integer and e.exp > 0:
            return e, e
        if isinstance(e, ModularIndexing):
            return sympy.S.Zero, e.args[2] - 1
        if isinstance(e, FloorDiv):
            limits = bound(e.args[0])
            if limits is None or not _at_least_zero(limits[0]):
                return None
            return sympy.S.Zero, limits[1] / e.args[1]  # floor(h / d) <= h / d
        return None

    def divides(divisor: Expr, term: Expr) -> bool:
        quotient = sympy.cancel(term / divisor)
        numerator, denominator = sympy.fraction(quotient)
        if denominator != 1 or not quotient.is_polynomial():
            return False
        if numerator.is_Number:
            return bool(numerator.is_Integer)
        return all(c.is_Integer for c in sympy.Poly(numerator).coeffs())

    def exact(base: Expr, divisor: Expr) -> Expr | None:
        whole: list[Expr] = []
        rest: list[Expr] = []
        for term in sympy.Add.make_args(sympy.expand(base)):
            (whole if divides(divisor, term) else rest).append(term)
        limits = bound(sympy.Add(*rest))
        if limits is None or not _at_least_zero(limits[0]):
            return None
        if not _at_least_zero(divisor - limits[1] - 1):
            return None
        return sympy.expand(sympy.cancel(sympy.Add(*whole) / divisor))

    def floor_div(base: Expr, divisor: Expr) -> Expr:
        quotient = exact(base, divisor)
        if quotient is not None:
            return quotient
        # (a // c) // (d / c) == a // d: divide by a term's sizes first when that is exact
        # (`(s1**2*x0 + s1*x1 + x2) // (12*s1**2)` is `x0 // 12` when x1, x2 < s1: a
        # reshape of attention scores over a symbolic length; unsimplified, its kernel
        # divided in int64 six times an element, 0.35 ms a layer on the H100)
        # `(x0 + 768*x1) // (768*s1)` is `x1 // s1` when x0 < 768
        for term in sympy.Add.make_args(sympy.expand(base)):
            coeff, monomial = term.as_coeff_Mul()
            sizes = sympy.Mul(*[f for f in sympy.Mul.make_args(monomial) if _size_power(f)])
            whole = abs(coeff) if coeff.is_Integer else sympy.S.One
            for part in dict.fromkeys((whole * sizes, sizes, whole)):
                if part == 1 or sympy.expand(part - divisor) == 0 or not divides(part, divisor):
                    continue
                partial = exact(base, part)
                if partial is not None:
                    return floor_div(partial, sympy.expand(sympy.cancel(divisor / part)))
        return FloorDiv(base, divisor)

    def modular(base: Expr, divisor: Expr, modulus: Expr) -> Expr:
        quotient = floor_div(base, divisor)
        if quotient.has(FloorDiv):
            return ModularIndexing(base, divisor, modulus)
        limits = bound(quotient)
        if (
            limits is not None
            and _at_least_zero(limits[0])
            and _at_least_zero(modulus - limits[1] - 1)
        ):
            return quotient
        return ModularIndexing(quotient, sympy.S.One, modulus)

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


def _size_power(factor: Expr) -> bool:
    """Whether a factor of a monomial is a size symbol or a positive power of one."""
    if isinstance(factor, sympy.Symbol):
        return _is_size(factor)
    return (
        isinstance(factor, sympy.Pow)
        and _is_size(factor.base)
        and factor.exp.is_Integer
        and int(factor.exp) > 0
    )


def _recombine(expr: Expr) -> Expr:
    """`c*(a % m) + c*m*(a // m)` is `c*a`."""
    terms = list(sympy.Add.make_args(expr))
    for position, term in enumerate(terms):
        # the coefficient may hold sizes (`s1**2*(x0 % 12) + 12*s1**2*(x0 // 12)`)
        found = [f for f in sympy.Mul.make_args(term) if isinstance(f, ModularIndexing)]
        if len(found) != 1 or found[0].args[1] != 1:
            continue
        rest = found[0]
        coeff = sympy.Mul(*[f for f in sympy.Mul.make_args(term) if f is not rest])
        value, modulus = rest.args[0], rest.args[2]
        partner = coeff * modulus * FloorDiv(value, modulus)
        for other, candidate in enumerate(terms):
            if other != position and sympy.expand(candidate - partner) == 0:
                remaining = [t for k, t in enumerate(terms) if k not in (position, other)]
                return _recombine(sympy.expand(sympy.Add(*remaining) + coeff * value))
    return expr
