"""Printing index expressions (sympy) as Triton integer arithmetic.

Triton's `//` and `%` on integers truncate (C semantics). The IR's own FloorDiv and
ModularIndexing read loop variables and sizes, non-negative wherever they are used unmasked,
so the truncating operators agree with floor division there. A Graph's sympy Mod, floor and
ceiling come from its symbolic sizes and may take a negative operand (`x[-1]` over a dim of
size s0 reads `Mod(-1, s0)`): they round as sympy does, through the prelude's
`ember_remainder` and `ember_floordiv`, unless both operands are known non-negative.
"""

from __future__ import annotations

import sympy

from ember.inductor.codegen.cpp.printer import PythonIndexPrinter


def _nonnegative(*exprs: sympy.Expr) -> bool:
    return all(expr.is_nonnegative for expr in exprs)


class TritonIndexPrinter(PythonIndexPrinter):
    def _print_Mod(self, expr: sympy.Mod) -> str:
        base, modulus = expr.args
        if _nonnegative(base, modulus):
            return super()._print_Mod(expr)
        return f"ember_remainder({self._print(base)}, {self._print(modulus)})"

    def _print_floor(self, expr: sympy.floor) -> str:
        numerator, denominator = expr.args[0].as_numer_denom()
        if _nonnegative(numerator, denominator):
            return super()._print_floor(expr)
        return f"ember_floordiv({self._print(numerator)}, {self._print(denominator)})"

    def _print_ceiling(self, expr: sympy.ceiling) -> str:
        # Python's spelling -(-n // d) truncates towards zero in Triton: ceiling(5/2) read 2
        numerator, denominator = expr.args[0].as_numer_denom()
        n, d = self._print(numerator), self._print(denominator)
        if _nonnegative(numerator, denominator):
            return f"((({n}) + ({d}) - 1) // ({d}))"
        return f"(-ember_floordiv(-({n}), {d}))"

    def _print_Max(self, expr: sympy.Max) -> str:
        result = self._print(expr.args[0])
        for arg in expr.args[1:]:
            result = f"tl.maximum({result}, {self._print(arg)})"
        return result

    def _print_Min(self, expr: sympy.Min) -> str:
        result = self._print(expr.args[0])
        for arg in expr.args[1:]:
            result = f"tl.minimum({result}, {self._print(arg)})"
        return result

    def _print_Pow(self, expr: sympy.Pow, rational: bool = False) -> str:
        base, exponent = expr.args
        if exponent.is_Integer and int(exponent) > 0:
            return "*".join([self.parenthesize(base, 50)] * int(exponent))
        raise NotImplementedError(f"index power {expr}")


def triton_index(expr: object) -> str:
    return TritonIndexPrinter().doprint(sympy.sympify(expr))
