"""Index arithmetic over symbolic loop variables: the variables, floor division and modular
indexing as sympy functions that simplify what they can prove, and helpers that turn a
multi-dimensional index into a flat offset and back.
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
        # (a*d + b) // d == a + b // d for an exact multiple term
        if isinstance(base, sympy.Add):
            quotient = [term for term in base.args if _divides(divisor, term)]
            if quotient:
                rest = [term for term in base.args if not _divides(divisor, term)]
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
            # terms that are multiples of divisor*modulus do not change the result
            kept = [t for t in base.args if not _divides(divisor * modulus, t)]
            if len(kept) < len(base.args):
                return ModularIndexing(sympy.Add(*kept), divisor, modulus)
        return None


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
