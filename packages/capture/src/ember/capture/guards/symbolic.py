"""Symbolic guards: the size conditions a Graph with symbolic sizes assumed, over the inputs.

Each size symbol stands for one input dim (`s0` is `x.shape[1]`). A condition the tracer's
shape environment recorded (`Eq(Mod(s0, 8), 0)`) is printed twice: as Python over the sizes
the guard check reads (`__s3 % 8 == 0`, no sympy per call), and in the user's terms
(`x.shape[1] % 8 == 0`). Expressions the printer does not know are evaluated with sympy.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import sympy

from ember.capture.guards.source import SizeSource
from ember.prims.symbolic import evaluate_expr

_RELATIONS: dict[type, str] = {
    sympy.Eq: "==",
    sympy.Ne: "!=",
    sympy.Ge: ">=",
    sympy.Gt: ">",
    sympy.Le: "<=",
    sympy.Lt: "<",
}


@dataclass(frozen=True)
class SizeCondition:
    """A condition over size symbols, and the input dim each of its symbols stands for."""

    expr: sympy.Basic
    sizes: tuple[tuple[str, SizeSource], ...]  # (symbol name, the dim it stands for)

    def sources(self) -> Mapping[str, SizeSource]:
        return dict(self.sizes)

    def python(self, read: Callable[[SizeSource], str]) -> str | None:
        """Python over the sizes (`read` gives the expression of each), or None when the
        printer does not know an operator of the expression."""
        sources = self.sources()
        return to_python(self.expr, lambda sym: read(sources[sym.name]))

    def text(self) -> str:
        """The condition as the user would write it (`x.shape[1] % 8 == 0`)."""
        sources = self.sources()
        printed = to_python(self.expr, lambda sym: sources[sym.name].name())
        return printed if printed is not None else str(self.expr)

    def holds(self, values: Mapping[str, int]) -> bool:
        """Whether the condition holds at these symbol values (sympy; for explanations)."""
        return bool(evaluate_expr(self.expr, values))


def to_python(expr: sympy.Basic, name: Callable[[sympy.Symbol], str]) -> str | None:
    """`expr` as a Python expression over integers (floor division for floor(a/b)), with
    each symbol printed by `name`; None when an operator has no integer Python form."""
    printer = _Printer(name)
    try:
        return printer.print(expr)
    except _Unprintable:
        return None


class _Unprintable(Exception):
    """An operator without an integer Python form here."""


# Python operator precedence, loosest first: an operand looser than its operator gets
# parentheses (and so does the right operand of `-`, `//` and `%` at equal precedence).
_OR, _AND, _NOT, _COMPARE, _ADD, _MUL, _UNARY, _POWER, _ATOM = range(9)


class _Printer:
    def __init__(self, name: Callable[[sympy.Symbol], str]) -> None:
        self.name = name

    def print(self, expr: sympy.Basic) -> str:
        return self._print(expr)[0]

    def _operand(self, expr: sympy.Basic, precedence: int, right: bool = False) -> str:
        text, own = self._print(expr)
        return f"({text})" if own < precedence or (right and own == precedence) else text

    def _print(self, expr: sympy.Basic) -> tuple[str, int]:
        if isinstance(expr, sympy.Symbol):
            return self.name(expr), _ATOM
        if expr is sympy.true or expr is sympy.false:
            return str(bool(expr)), _ATOM
        if isinstance(expr, sympy.Integer):
            value = int(expr)
            return str(value), (_ATOM if value >= 0 else _UNARY)
        if isinstance(expr, sympy.core.relational.Relational):
            operator = _RELATIONS.get(type(expr))
            if operator is None:
                raise _Unprintable
            lhs = self._operand(expr.lhs, _ADD)
            return f"{lhs} {operator} {self._operand(expr.rhs, _ADD)}", _COMPARE
        if isinstance(expr, (sympy.And, sympy.Or)):
            level, word = (_AND, " and ") if isinstance(expr, sympy.And) else (_OR, " or ")
            return word.join(self._operand(a, level + 1) for a in expr.args), level
        if isinstance(expr, sympy.Not):
            return f"not {self._operand(expr.args[0], _NOT)}", _NOT
        if isinstance(expr, sympy.Add):
            return self._add(expr), _ADD
        if isinstance(expr, sympy.Mul):
            return self._mul(expr)
        if isinstance(expr, sympy.Pow):
            base, exponent = expr.args
            if not (isinstance(exponent, sympy.Integer) and exponent > 0):
                raise _Unprintable
            return f"{self._operand(base, _ATOM)} ** {int(exponent)}", _POWER
        if isinstance(expr, (sympy.floor, sympy.ceiling)):
            numerator, denominator = expr.args[0].as_numer_denom()
            if denominator == 1:
                return self._print(numerator)
            top = self._operand(numerator, _MUL)
            bottom = self._operand(denominator, _MUL, right=True)
            if isinstance(expr, sympy.floor):
                return f"{top} // {bottom}", _MUL
            return f"-(-{self._operand(numerator, _UNARY)} // {bottom})", _UNARY
        if isinstance(expr, sympy.Mod):
            a, b = expr.args
            return f"{self._operand(a, _MUL)} % {self._operand(b, _MUL, right=True)}", _MUL
        if isinstance(expr, (sympy.Max, sympy.Min)):
            function = "max" if isinstance(expr, sympy.Max) else "min"
            return f"{function}({', '.join(self._print(a)[0] for a in expr.args)})", _ATOM
        raise _Unprintable

    def _add(self, expr: sympy.Add) -> str:
        terms = sorted(expr.args, key=lambda term: term.is_number)  # symbols first
        text = self._operand(terms[0], _ADD)
        for term in terms[1:]:
            coefficient, _ = term.as_coeff_Mul()
            if coefficient < 0:
                text += f" - {self._operand(-term, _ADD, right=True)}"
            else:
                text += f" + {self._operand(term, _ADD)}"
        return text

    def _mul(self, expr: sympy.Mul) -> tuple[str, int]:
        coefficient, rest = expr.as_coeff_Mul()
        if not isinstance(coefficient, sympy.Integer):
            raise _Unprintable
        factors = [self._operand(f, _MUL) for f in sympy.Mul.make_args(rest)]
        if coefficient == -1:
            return f"-{' * '.join(factors)}", _UNARY
        if coefficient != 1:
            factors.insert(0, str(int(coefficient)))
        return " * ".join(factors), _MUL
