"""Static reasoning about size expressions from the value ranges of their symbols.

`bound` computes an interval containing every value an expression can take (interval
arithmetic); `decide` answers a boolean expression as True or False when the ranges settle it
for every value, and None when they do not. Nothing here records guards.
"""

from __future__ import annotations

from collections.abc import Container, Mapping
from dataclasses import dataclass

import sympy

_NEG_INF = sympy.S.NegativeInfinity
_POS_INF = sympy.S.Infinity


@dataclass(frozen=True)
class ValueRange:
    """A closed interval [lower, upper] of sympy numbers; either end may be infinite."""

    lower: sympy.Expr
    upper: sympy.Expr

    @staticmethod
    def of(lower: int | None, upper: int | None) -> ValueRange:
        low = _NEG_INF if lower is None else sympy.Integer(lower)
        high = _POS_INF if upper is None else sympy.Integer(upper)
        return ValueRange(low, high)

    @staticmethod
    def unknown() -> ValueRange:
        return ValueRange(_NEG_INF, _POS_INF)

    def is_unknown(self) -> bool:
        return self.lower is _NEG_INF and self.upper is _POS_INF

    def intersect(self, other: ValueRange) -> ValueRange:
        return ValueRange(_max(self.lower, other.lower), _min(self.upper, other.upper))


Ranges = Mapping[sympy.Symbol, ValueRange]


def bound(expr: sympy.Basic, ranges: Ranges) -> ValueRange:
    """An interval holding every value of `expr` when each symbol lies in its range."""
    if expr.is_Number:
        return ValueRange(expr, expr)
    if isinstance(expr, sympy.Symbol):
        return ranges.get(expr) or _assumed_range(expr)
    rule = _RULES.get(type(expr))
    if rule is None:
        for cls, candidate in _RULES.items():
            if isinstance(expr, cls):
                rule = candidate
                break
    if rule is None:
        return ValueRange.unknown()
    return rule(expr, ranges)


def decide(
    expr: sympy.Basic, ranges: Ranges, known: Container[sympy.Basic] = frozenset()
) -> bool | None:
    """True or False when `expr` has that value for every value of its symbols, else None.

    `known` holds conditions already established (canonical relationals), such as guards.
    """
    if expr is sympy.true:
        return True
    if expr is sympy.false:
        return False
    if isinstance(expr, sympy.Not):
        inner = decide(expr.args[0], ranges, known)
        return None if inner is None else not inner
    if isinstance(expr, sympy.And):
        answers = [decide(arg, ranges, known) for arg in expr.args]
        if False in answers:
            return False
        return True if all(answers) else None
    if isinstance(expr, sympy.Or):
        answers = [decide(arg, ranges, known) for arg in expr.args]
        if True in answers:
            return True
        return False if all(answer is False for answer in answers) else None
    if isinstance(expr, sympy.core.relational.Relational):
        if canonical(expr) in known:
            return True
        if canonical(sympy.Not(expr)) in known:
            return False
        return _decide_relational(expr, ranges)
    return expr in known or None


def canonical(expr: sympy.Basic) -> sympy.Basic:
    """A relational as `positive terms op the rest` (s0 + 1 > 3 -> s0 > 2, 4 > s0 -> s0 < 4).

    Guards are recorded in this form, so equal conditions compare equal.
    """
    if not isinstance(expr, sympy.core.relational.Relational):
        return expr
    difference = sympy.expand(expr.lhs - expr.rhs)
    if not isinstance(difference, sympy.Expr) or difference.is_number:
        return expr
    func = expr.func
    constant, rest = difference.as_coeff_Add()
    terms = sympy.Add.make_args(rest)
    if all(term.could_extract_minus_sign() for term in terms):
        constant, terms = -constant, tuple(-term for term in terms)
        func = expr.reversed.func
    positive = [term for term in terms if not term.could_extract_minus_sign()]
    negative = [-term for term in terms if term.could_extract_minus_sign()]
    lhs, rhs = sympy.Add(*positive), sympy.Add(*negative) - constant
    symmetric = func in (sympy.Eq, sympy.Ne) and not rhs.is_number
    if symmetric and sympy.default_sort_key(rhs) < sympy.default_sort_key(lhs):
        lhs, rhs = rhs, lhs
    return func(lhs, rhs)


# ---- relationals -----------------------------------------------------------------------------


def _decide_relational(rel: sympy.core.relational.Relational, ranges: Ranges) -> bool | None:
    difference = sympy.expand(rel.lhs - rel.rhs)
    answer = _decide_sign(rel, bound(difference, ranges), difference.is_integer is True)
    if answer is not None:
        return answer
    # Intervals lose correlations (s0*s1 - s0); shifting every symbol to start at its lower
    # bound lets sympy's sign assumptions see a sum of nonnegative terms instead.
    shifted = _shift_to_lower_bounds(difference, ranges)
    if shifted is None:
        return None
    return _decide_sign(rel, _sign_range(shifted), difference.is_integer is True)


def _decide_sign(rel: sympy.Basic, diff: ValueRange, integer: bool) -> bool | None:
    """Decide `lhs op rhs` from the range of lhs - rhs."""
    low, high = diff.lower, diff.upper
    if integer:  # strict integer inequalities tighten by one
        positive, negative = low >= 1, high <= -1
    else:
        positive, negative = low > 0, high < 0
    nonnegative, nonpositive = low >= 0, high <= 0
    if isinstance(rel, sympy.Eq):
        return _either(bool(low == 0 and high == 0), bool(positive or negative))
    if isinstance(rel, sympy.Ne):
        return _either(bool(positive or negative), bool(low == 0 and high == 0))
    if isinstance(rel, sympy.StrictGreaterThan):
        return _either(bool(positive), bool(nonpositive))
    if isinstance(rel, sympy.GreaterThan):
        return _either(bool(nonnegative), bool(negative))
    if isinstance(rel, sympy.StrictLessThan):
        return _either(bool(negative), bool(nonnegative))
    if isinstance(rel, sympy.LessThan):
        return _either(bool(nonpositive), bool(positive))
    return None


def _either(true: bool, false: bool) -> bool | None:
    if true:
        return True
    if false:
        return False
    return None


def _shift_to_lower_bounds(expr: sympy.Expr, ranges: Ranges) -> sympy.Expr | None:
    mapping = {}
    for sym in expr.free_symbols:
        value_range = ranges.get(sym) or _assumed_range(sym)
        if value_range.lower is _NEG_INF:
            return None
        offset = sympy.Dummy(f"{sym}_offset", integer=bool(sym.is_integer), nonnegative=True)
        mapping[sym] = value_range.lower + offset
    if not mapping:
        return None
    return sympy.expand(expr.xreplace(mapping))


def _sign_range(expr: sympy.Expr) -> ValueRange:
    """The coarse range sympy's sign assumptions give `expr`."""
    if expr.is_zero:
        return ValueRange(sympy.S.Zero, sympy.S.Zero)
    low = _NEG_INF
    high = _POS_INF
    if expr.is_nonnegative:
        low = sympy.S.Zero
    if expr.is_positive:
        low = sympy.S.One if expr.is_integer else sympy.Rational(1, 2**64)
    if expr.is_nonpositive:
        high = sympy.S.Zero
    if expr.is_negative:
        high = sympy.S.NegativeOne if expr.is_integer else -sympy.Rational(1, 2**64)
    # A nonconstant sum whose constant term bounds it (2 + t with t >= 0) bounds tighter.
    if isinstance(expr, sympy.Add):
        constant, rest = expr.as_coeff_Add()
        if rest.is_nonnegative:
            low = _max(low, constant)
        if rest.is_nonpositive:
            high = _min(high, constant)
    return ValueRange(low, high)


# ---- interval rules per expression kind ---------------------------------------------------


def _assumed_range(sym: sympy.Basic) -> ValueRange:
    if sym.is_positive:
        return ValueRange(sympy.S.One if sym.is_integer else sympy.S.Zero, _POS_INF)
    if sym.is_nonnegative:
        return ValueRange(sympy.S.Zero, _POS_INF)
    return ValueRange.unknown()


def _add(expr: sympy.Basic, ranges: Ranges) -> ValueRange:
    low: sympy.Expr = sympy.S.Zero
    high: sympy.Expr = sympy.S.Zero
    for arg in expr.args:
        term = bound(arg, ranges)
        low = low + term.lower
        high = high + term.upper
    return ValueRange(low, high)


def _mul(expr: sympy.Basic, ranges: Ranges) -> ValueRange:
    result = ValueRange(sympy.S.One, sympy.S.One)
    for arg in expr.args:
        result = _multiply(result, bound(arg, ranges))
    return result


def _multiply(a: ValueRange, b: ValueRange) -> ValueRange:
    corners = [_times(x, y) for x in (a.lower, a.upper) for y in (b.lower, b.upper)]
    return ValueRange(_least(corners), _greatest(corners))


def _times(x: sympy.Expr, y: sympy.Expr) -> sympy.Expr:
    # The values are finite: 0 times an unbounded factor is 0, not nan.
    if x == 0 or y == 0:
        return sympy.S.Zero
    return x * y


def _pow(expr: sympy.Basic, ranges: Ranges) -> ValueRange:
    base_expr, exponent = expr.args
    base = bound(base_expr, ranges)
    if not exponent.is_Number:
        power = bound(exponent, ranges)
        if base.lower >= 1 and power.lower >= 0:
            return ValueRange(base.lower**power.lower, base.upper**power.upper)
        return ValueRange.unknown()
    if exponent.is_integer and exponent >= 0:
        if exponent % 2 == 1 or base.lower >= 0:
            return ValueRange(base.lower**exponent, base.upper**exponent)
        if base.upper <= 0:
            return ValueRange(base.upper**exponent, base.lower**exponent)
        return ValueRange(sympy.S.Zero, _max(base.lower**exponent, base.upper**exponent))
    if exponent > 0 and base.lower >= 0:
        return ValueRange(base.lower**exponent, base.upper**exponent)
    if exponent < 0 and base.lower > 0:
        return ValueRange(_reciprocal_power(base.upper, exponent), base.lower**exponent)
    return ValueRange.unknown()


def _reciprocal_power(value: sympy.Expr, exponent: sympy.Expr) -> sympy.Expr:
    return sympy.S.Zero if value is _POS_INF else value**exponent


def _floor(expr: sympy.Basic, ranges: Ranges) -> ValueRange:
    inner = bound(expr.args[0], ranges)
    return ValueRange(sympy.floor(inner.lower), sympy.floor(inner.upper))


def _ceiling(expr: sympy.Basic, ranges: Ranges) -> ValueRange:
    inner = bound(expr.args[0], ranges)
    return ValueRange(sympy.ceiling(inner.lower), sympy.ceiling(inner.upper))


def _mod(expr: sympy.Basic, ranges: Ranges) -> ValueRange:
    # sympy's Mod, like Python's %, takes the divisor's sign.
    dividend, divisor = (bound(arg, ranges) for arg in expr.args)
    integer = all(arg.is_integer for arg in expr.args)
    step = sympy.S.One if integer else sympy.S.Zero
    if divisor.lower > 0:
        if dividend.lower >= 0 and dividend.upper < divisor.lower:
            return dividend
        return ValueRange(sympy.S.Zero, divisor.upper - step)
    if divisor.upper < 0:
        if dividend.upper <= 0 and dividend.lower > divisor.upper:
            return dividend
        return ValueRange(divisor.lower + step, sympy.S.Zero)
    return ValueRange.unknown()


def _max_rule(expr: sympy.Basic, ranges: Ranges) -> ValueRange:
    parts = [bound(arg, ranges) for arg in expr.args]
    return ValueRange(_greatest([p.lower for p in parts]), _greatest([p.upper for p in parts]))


def _min_rule(expr: sympy.Basic, ranges: Ranges) -> ValueRange:
    parts = [bound(arg, ranges) for arg in expr.args]
    return ValueRange(_least([p.lower for p in parts]), _least([p.upper for p in parts]))


def _abs(expr: sympy.Basic, ranges: Ranges) -> ValueRange:
    inner = bound(expr.args[0], ranges)
    if inner.lower >= 0:
        return inner
    if inner.upper <= 0:
        return ValueRange(-inner.upper, -inner.lower)
    return ValueRange(sympy.S.Zero, _max(-inner.lower, inner.upper))


def _max(a: sympy.Expr, b: sympy.Expr) -> sympy.Expr:
    return a if bool(a >= b) else b


def _min(a: sympy.Expr, b: sympy.Expr) -> sympy.Expr:
    return a if bool(a <= b) else b


def _greatest(values: list[sympy.Expr]) -> sympy.Expr:
    result = values[0]
    for value in values[1:]:
        result = _max(result, value)
    return result


def _least(values: list[sympy.Expr]) -> sympy.Expr:
    result = values[0]
    for value in values[1:]:
        result = _min(result, value)
    return result


_RULES = {
    sympy.Add: _add,
    sympy.Mul: _mul,
    sympy.Pow: _pow,
    sympy.floor: _floor,
    sympy.ceiling: _ceiling,
    sympy.Mod: _mod,
    sympy.Max: _max_rule,
    sympy.Min: _min_rule,
    sympy.Abs: _abs,
}
