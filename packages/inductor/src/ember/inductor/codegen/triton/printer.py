"""Printing index expressions (sympy) as Triton integer arithmetic.

Loop variables and sizes are integer blocks or scalars; indices are non-negative wherever
they are used unmasked, so Triton's truncating `//` and `%` agree with floor division.
"""

from __future__ import annotations

import sympy

from ember.inductor.codegen.cpp.printer import PythonIndexPrinter


class TritonIndexPrinter(PythonIndexPrinter):
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
