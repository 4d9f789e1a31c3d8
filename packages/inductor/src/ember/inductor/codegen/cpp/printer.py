"""Printing index expressions (sympy) as C++ and as Python."""

from __future__ import annotations

import sympy
from sympy.printing.str import StrPrinter

from ember.inductor.ir.indexing import FloorDiv, ModularIndexing


class CppIndexPrinter(StrPrinter):
    """Integer index arithmetic in C++ (`int64_t` everywhere)."""

    def _print_Integer(self, expr: sympy.Integer) -> str:
        return f"{int(expr)}L"

    def _print_Symbol(self, expr: sympy.Symbol) -> str:
        return expr.name

    def _print_Mul(self, expr: sympy.Mul) -> str:
        return "*".join(self.parenthesize(a, 50) for a in expr.args)

    def _print_Add(self, expr: sympy.Add, order: str | None = None) -> str:
        return " + ".join(self.parenthesize(a, 40) for a in expr.args)

    def _print_Pow(self, expr: sympy.Pow, rational: bool = False) -> str:
        base, exponent = expr.args
        if exponent.is_Integer and int(exponent) > 0:
            return "*".join([self.parenthesize(base, 50)] * int(exponent))
        raise NotImplementedError(f"index power {expr}")

    def _print_Rational(self, expr: sympy.Rational) -> str:
        return f"({int(expr.p)}.0/{int(expr.q)}.0)"

    def _print_FloorDiv(self, expr: FloorDiv) -> str:
        base, divisor = expr.args
        return f"(({self._print(base)}) / ({self._print(divisor)}))"

    # A Graph's symbolic sizes use sympy's floor, ceiling and Mod (a convolution's output
    # size `floor((s0 - 1)/2) + 1`): integer C++ with Python's rounding, whatever the signs.
    def _print_floor(self, expr: sympy.floor) -> str:
        numerator, denominator = expr.args[0].as_numer_denom()
        return f"ember_floordiv({self._print(numerator)}, {self._print(denominator)})"

    def _print_ceiling(self, expr: sympy.ceiling) -> str:
        numerator, denominator = expr.args[0].as_numer_denom()
        return f"(-ember_floordiv(-({self._print(numerator)}), {self._print(denominator)}))"

    def _print_Mod(self, expr: sympy.Mod) -> str:
        base, modulus = expr.args
        return f"ember_remainder<int64_t>({self._print(base)}, {self._print(modulus)})"

    def _print_ModularIndexing(self, expr: ModularIndexing) -> str:
        base, divisor, modulus = expr.args
        return f"((({self._print(base)}) / ({self._print(divisor)})) % ({self._print(modulus)}))"

    def _print_Max(self, expr: sympy.Max) -> str:
        return f"std::max<int64_t>({', '.join(self._print(a) for a in expr.args)})"

    def _print_Min(self, expr: sympy.Min) -> str:
        return f"std::min<int64_t>({', '.join(self._print(a) for a in expr.args)})"


class PythonIndexPrinter(StrPrinter):
    """Sizes in the Python wrapper (integers, `//` and `%`). Graph sizes use sympy's floor,
    ceiling, Mod, Max and Min (a convolution's output size `floor((s0 - 1)/2) + 1`), which
    the wrapper's globals do not name: they print as integer Python."""

    def _print_floor(self, expr: sympy.floor) -> str:
        numerator, denominator = expr.args[0].as_numer_denom()
        return f"(({self._print(numerator)}) // ({self._print(denominator)}))"

    def _print_ceiling(self, expr: sympy.ceiling) -> str:
        numerator, denominator = expr.args[0].as_numer_denom()
        return f"(-(-({self._print(numerator)}) // ({self._print(denominator)})))"

    def _print_Mod(self, expr: sympy.Mod) -> str:
        base, modulus = expr.args
        return f"(({self._print(base)}) % ({self._print(modulus)}))"

    def _print_Max(self, expr: sympy.Max) -> str:
        return f"max({', '.join(self._print(a) for a in expr.args)})"

    def _print_Min(self, expr: sympy.Min) -> str:
        return f"min({', '.join(self._print(a) for a in expr.args)})"

    def _print_FloorDiv(self, expr: FloorDiv) -> str:
        base, divisor = expr.args
        return f"(({self._print(base)}) // ({self._print(divisor)}))"

    def _print_ModularIndexing(self, expr: ModularIndexing) -> str:
        base, divisor, modulus = expr.args
        return f"((({self._print(base)}) // ({self._print(divisor)})) % ({self._print(modulus)}))"


def cpp_index(expr: sympy.Expr) -> str:
    return CppIndexPrinter().doprint(sympy.sympify(expr))


def python_index(expr: object) -> str:
    if isinstance(expr, int):
        return str(expr)
    return PythonIndexPrinter().doprint(sympy.sympify(expr))
