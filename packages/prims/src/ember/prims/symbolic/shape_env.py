"""The shape environment: size symbols, their hints and ranges, and the guards a trace made.

A `ShapeEnv` creates symbols (s0, s1, ...) with an example value (the hint) and a value
range, hands them out as `torch.SymInt`s, and records a `ShapeGuard` each time a size
decision depends on the hint rather than on what the ranges and earlier guards prove.
Equalities it records become substitutions, so later expressions use the surviving symbol.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import sympy
import torch

from ember.prims.graph import ShapeGuard
from ember.prims.source import user_location
from ember.prims.specs import SymbolInfo, symbol
from ember.prims.symbolic.evaluate import Number, as_python, evaluate_expr, first_failing_guard
from ember.prims.symbolic.sym_node import SymNode
from ember.prims.symbolic.value_ranges import ValueRange, bound, canonical, decide

log = logging.getLogger("ember.prims.symbolic")

SymValue = torch.SymInt | torch.SymFloat | torch.SymBool


class ShapeEnv:
    """Symbols, hints, value ranges and guards of one trace."""

    def __init__(self) -> None:
        self.symbols: dict[str, SymbolInfo] = {}
        self.guards: list[ShapeGuard] = []
        self.descriptions: dict[str, str] = {}
        self._hints: dict[str, int] = {}
        self._ranges: dict[sympy.Symbol, ValueRange] = {}
        self._replacements: dict[sympy.Symbol, sympy.Expr] = {}
        self.replacements_version = 0
        self._guard_exprs: set[sympy.Basic] = set()
        self._facts: set[sympy.Basic] = set()
        self._static_cache: dict[sympy.Basic, bool | None] = {}

    @classmethod
    def rebuilt(cls, symbols: Mapping[str, SymbolInfo], guards: Sequence[ShapeGuard]) -> ShapeEnv:
        """The environment a Graph's symbols and guards came from (same names, hints, ranges;
        the guards learnt again, each keeping its user line), for a later pass to re-trace
        the Graph over the same symbols. Symbols must be named s0, s1, ... with hints."""
        env = cls()
        for name, info in sorted(
            symbols.items(), key=lambda item: _creation_order(symbol(item[0]))
        ):
            if info.hint is None:
                raise ValueError(f"size symbol {name} has no hint (an example size)")
            made = env.create_symbol(
                info.hint, description=name, lower=info.lower, upper=info.upper
            )
            if str(made) != name:
                raise ValueError(
                    f"size symbols ({', '.join(symbols)}) are not named s0, s1, ... in order"
                )
        for guard in guards:
            count = len(env.guards)
            env.record_guard(guard.expr)
            if len(env.guards) > count:
                env.guards[-1] = guard  # keep the user line that made the assumption
        return env

    # ---- symbols ----------------------------------------------------------------------------

    def create_symbol(
        self, hint: int, *, description: str = "", lower: int = 2, upper: int | None = None
    ) -> sympy.Symbol:
        """A fresh size symbol with example value `hint` and inclusive range [lower, upper]."""
        if type(hint) is not int:
            raise TypeError(f"a size symbol's hint must be an int, got {type(hint).__name__}")
        if hint < lower or (upper is not None and hint > upper):
            shown = f"[{lower}, {'inf' if upper is None else upper}]"
            raise ValueError(f"hint {hint} lies outside the symbol's range {shown}")
        name = f"s{len(self.symbols)}"
        self.symbols[name] = SymbolInfo(name, lower, upper, hint)
        self.descriptions[name] = description
        self._hints[name] = hint
        sym = symbol(name)
        self._ranges[sym] = ValueRange.of(lower, upper)
        return sym

    def create_symint(
        self, hint: int, *, description: str = "", lower: int = 2, upper: int | None = None
    ) -> torch.SymInt:
        """A `torch.SymInt` standing for a fresh size symbol (see `create_symbol`)."""
        sym = self.create_symbol(hint, description=description, lower=lower, upper=upper)
        return torch.SymInt(SymNode(sym, self, int, hint))

    def value_range(self, sym: sympy.Symbol) -> ValueRange:
        """What the declared range and the guards so far say about a symbol's values."""
        return self._ranges.get(sym, ValueRange.unknown())

    # ---- conversions ------------------------------------------------------------------------

    def to_sympy(self, value: Any) -> Number | sympy.Basic:
        """An int, float or bool as itself; a SymInt/SymFloat/SymBool (or node) as its expr.

        Expressions come back with this environment's substitutions applied, and as plain
        Python numbers when they are constant.
        """
        if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
            value = value.node
        if isinstance(value, SymNode):
            return _python_if_constant(value.expr, value.pytype)
        if isinstance(value, (bool, int, float)):
            return value
        if isinstance(value, sympy.Basic):
            return _python_if_constant(self.replace(value), None)
        if hasattr(value, "maybe_as_int") and value.maybe_as_int() is not None:
            return int(value.maybe_as_int())
        raise TypeError(f"cannot convert {type(value).__name__} to a size expression")

    def to_symint(self, expr: sympy.Basic | int) -> torch.SymInt | int:
        """A SymInt for an integer expression over this environment's symbols (int if constant)."""
        return self._wrap(expr, int)

    def to_symfloat(self, expr: sympy.Basic | float) -> torch.SymFloat | float:
        return self._wrap(expr, float)

    def to_symbool(self, expr: sympy.Basic | bool) -> torch.SymBool | bool:
        return self._wrap(expr, bool)

    def _wrap(self, expr: sympy.Basic | Number, pytype: type) -> Any:
        expr = self.replace(sympy.sympify(expr))
        constant = _python_if_constant(expr, pytype)
        if not isinstance(constant, sympy.Basic):
            return pytype(constant)
        node = SymNode(expr, self, pytype, pytype(self.evaluate(expr)))
        return node.wrap()

    # ---- queries ----------------------------------------------------------------------------

    def evaluate(self, expr: sympy.Basic | Number) -> Number:
        """The value of `expr` when every symbol takes its hint."""
        return evaluate_expr(expr, self._hints)

    def replace(self, expr: sympy.Basic) -> sympy.Basic:
        """`expr` with the substitutions that recorded equalities allow (s1 -> s0, s2 -> 8)."""
        if not self._replacements or not isinstance(expr, sympy.Basic):
            return expr
        return expr.xreplace(self._replacements)

    def bound(self, expr: sympy.Basic) -> ValueRange:
        """An interval containing every value `expr` can take under the ranges and guards."""
        return bound(self.replace(expr), self._ranges)

    def static_value(self, expr: sympy.Basic | bool) -> bool | None:
        """True or False when the ranges and the guards so far decide `expr`, else None."""
        if isinstance(expr, bool):
            return expr
        expr = self.replace(expr)
        if expr in self._static_cache:
            return self._static_cache[expr]
        answer = decide(expr, self._ranges, self._facts)
        self._static_cache[expr] = answer
        return answer

    def is_statically_true(self, expr: sympy.Basic | bool) -> bool:
        """Whether `expr` holds for every value the ranges and the guards so far allow."""
        return self.static_value(expr) is True

    def simplify(self, expr: sympy.Basic) -> sympy.Basic:
        """`expr` after substitutions, with what the ranges decide folded in.

        Relationals the ranges settle become True/False, Max/Min drop arguments that cannot
        win, and integer subterms whose range is a single value become that value.
        """
        if not isinstance(expr, sympy.Basic):
            return expr
        return self._simplify(self.replace(expr), {})

    def _simplify(self, expr: sympy.Basic, memo: dict[sympy.Basic, sympy.Basic]) -> sympy.Basic:
        if expr.is_Atom:
            return expr
        if expr in memo:
            return memo[expr]
        args = [self._simplify(arg, memo) for arg in expr.args]
        rebuilt = expr.func(*args) if args != list(expr.args) else expr
        result = self._simplify_top(rebuilt)
        memo[expr] = result
        return result

    def _simplify_top(self, expr: sympy.Basic) -> sympy.Basic:
        if isinstance(expr, sympy.core.relational.Relational):
            answer = self.static_value(expr)
            return expr if answer is None else sympy.sympify(answer)
        if isinstance(expr, (sympy.Max, sympy.Min)):
            return self.min_max(type(expr), expr.args)
        if isinstance(expr, sympy.Expr) and expr.is_integer and not expr.is_Atom:
            value_range = bound(expr, self._ranges)
            if value_range.lower == value_range.upper and value_range.lower.is_finite:
                return value_range.lower
        return expr

    def min_max(self, kind: type, args: tuple[sympy.Basic, ...]) -> sympy.Basic:
        """Max or Min of `args` without the arguments that statically cannot be the result."""
        survivors: list[sympy.Basic] = []
        for arg in args:
            if any(self._dominates(kind, kept, arg) for kept in survivors):
                continue
            survivors = [kept for kept in survivors if not self._dominates(kind, arg, kept)]
            survivors.append(arg)
        return kind(*survivors)

    def _dominates(self, kind: type, a: sympy.Basic, b: sympy.Basic) -> bool:
        relation = sympy.Ge(a, b) if kind is sympy.Max else sympy.Le(a, b)
        return self.is_statically_true(relation)

    # ---- guards -----------------------------------------------------------------------------

    def guard_bool(self, expr: sympy.Basic | bool, hint: bool | None = None) -> bool:
        """The value of a condition; records it as a guard unless statically decided."""
        answer = self.static_value(expr)
        if answer is not None:
            return answer
        assert isinstance(expr, sympy.Basic)
        expr = self.replace(expr)
        value = bool(self.evaluate(expr)) if hint is None else bool(hint)
        self.record_guard(expr if value else sympy.Not(expr))
        return value

    def specialize(self, expr: sympy.Basic | Number, hint: Number | None = None) -> Number:
        """The hint value of `expr`, recording `Eq(expr, value)` unless it is constant."""
        if not isinstance(expr, sympy.Basic):
            return expr
        expr = self.replace(expr)
        value = self.evaluate(expr) if hint is None else hint
        if expr.is_number:
            return value
        condition = sympy.Eq(expr, value)
        if self.static_value(condition) is not True:
            self.record_guard(condition)
        return value

    def record_guard(self, expr: sympy.Basic) -> None:
        """Record that `expr` holds (it must hold at the hints); learn from it for later."""
        expr = canonical(self.replace(expr))
        if expr is sympy.true or expr in self._guard_exprs:
            return
        if expr is sympy.false or self.evaluate(expr) is not True:
            raise AssertionError(f"guard {expr} does not hold at the hints {self._hints}")
        self._guard_exprs.add(expr)
        source = user_location()
        self.guards.append(ShapeGuard(expr, source))
        log.debug("guard %s at %s", expr, source.short() if source else "<unknown>")
        self._learn(expr)

    def check_guards(self, values: Mapping[str, int]) -> ShapeGuard | None:
        """The first of this environment's ranges and guards that `values` break, or None."""
        return first_failing_guard(self.guards, values, self.symbols)

    # ---- learning from guards ---------------------------------------------------------------

    def _learn(self, expr: sympy.Basic) -> None:
        self._static_cache.clear()
        if isinstance(expr, sympy.And):
            for arg in expr.args:
                self._learn(arg)
            return
        self._facts.add(expr)
        if not isinstance(expr, sympy.core.relational.Relational):
            return
        difference = sympy.expand(expr.lhs - expr.rhs)
        if isinstance(expr, sympy.Eq) and self._substitute(difference):
            return
        self._tighten(expr, difference)

    def _substitute(self, difference: sympy.Expr) -> bool:
        """From `difference == 0`, replace its newest symbol that it determines exactly."""
        for sym in sorted(difference.free_symbols, key=_creation_order, reverse=True):
            rest, term = difference.as_independent(sym, as_Add=True)
            coefficient = term / sym
            if not coefficient.is_Integer or coefficient == 0:
                continue
            value = -rest / coefficient
            if value.is_number and not value.is_Integer:
                continue
            if not value.is_number and abs(coefficient) != 1:
                continue
            self._add_replacement(sym, value)
            return True
        return False

    def _add_replacement(self, sym: sympy.Symbol, value: sympy.Expr) -> None:
        mapping = {sym: value}
        self._replacements = {s: e.xreplace(mapping) for s, e in self._replacements.items()}
        self._replacements[sym] = value
        self.replacements_version += 1
        facts = {canonical(fact.xreplace(mapping)) for fact in self._facts}
        self._facts = {fact for fact in facts if fact is not sympy.true}
        self._static_cache.clear()

    def _tighten(self, rel: sympy.Basic, difference: sympy.Expr) -> None:
        """Narrow a symbol's range from a guard `k*s + c op 0`."""
        if len(difference.free_symbols) != 1:
            return
        (sym,) = difference.free_symbols
        rest, term = difference.as_independent(sym, as_Add=True)
        coefficient = term / sym
        if not (coefficient.is_Integer and rest.is_number) or coefficient == 0:
            return
        limit = -rest / coefficient  # the relation compares s with this value
        flipped = coefficient < 0
        current = self._ranges.get(sym, ValueRange.unknown())
        low, high = current.lower, current.upper
        if isinstance(rel, sympy.Ne):
            if limit == low:
                low = low + 1
            elif limit == high:
                high = high - 1
        elif isinstance(rel, (sympy.StrictGreaterThan, sympy.StrictLessThan)):
            above = isinstance(rel, sympy.StrictGreaterThan) != flipped
            if above:
                low = sympy.floor(limit) + 1
            else:
                high = sympy.ceiling(limit) - 1
        elif isinstance(rel, (sympy.GreaterThan, sympy.LessThan)):
            above = isinstance(rel, sympy.GreaterThan) != flipped
            if above:
                low = sympy.ceiling(limit)
            else:
                high = sympy.floor(limit)
        self._ranges[sym] = current.intersect(ValueRange(low, high))

    # ---- what torch's own Python helpers ask of `node.shape_env` ----------------------------

    def evaluate_sym_node(
        self, node: SymNode, size_oblivious: bool = False, fallback_value: bool | None = None
    ) -> Number:
        """torch's guard_or_false/guard_or_true call this; every ember symbol has a hint.

        Those helpers pass the answer that is safe whichever way the condition goes
        (`fallback_value`, torch's answer for sizes without a hint); where the ranges and
        guards so far do not decide the condition, that answer is taken without a guard, so
        a layout question (is this slice of a 64-wide buffer contiguous?) does not pin a
        size to one side of a bound."""
        if node.pytype is bool and fallback_value is not None:
            decided = self.static_value(node.expr)
            return decided if decided is not None else bool(fallback_value)
        if node.pytype is bool:
            return self.guard_bool(node.expr, bool(node.hint))
        return node.pytype(self.specialize(node.expr, node.hint))

    def _maybe_evaluate_static(self, expr: sympy.Basic, **_: Any) -> sympy.Basic | None:
        """torch's statically_known_true calls this: the static value, or None."""
        answer = self.static_value(expr)
        return None if answer is None else sympy.sympify(answer)


def _creation_order(sym: sympy.Symbol) -> tuple[int, str]:
    name = str(sym)
    return (int(name[1:]), name) if name[1:].isdigit() else (-1, name)


def _python_if_constant(expr: sympy.Basic, pytype: type | None) -> Number | sympy.Basic:
    if (
        expr is sympy.true
        or expr is sympy.false
        or (isinstance(expr, sympy.Expr) and expr.is_number)
    ):
        value = as_python(expr)
        return pytype(value) if pytype is not None else value
    return expr
