"""sympy expressions as JSON expression trees, and back, without ever parsing text.

A tree is a JSON integer (Integer), a string (a declared size Symbol), true/false, or an
object {"op": ..., ...}. Decoding rebuilds each node with its sympy constructor and
`evaluate=False`, which reproduces the encoded expression exactly and never evaluates
(`10**10**9` stays a two-leaf Pow); operand kinds, arities and depth are checked first.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

import sympy
from sympy.logic.boolalg import Boolean, BooleanFalse, BooleanTrue

from ember.prims.errors import GraphFormatError
from ember.prims.serialize.limits import (
    MAX_EXPR_ARGS,
    MAX_EXPR_DEPTH,
    MAX_FLOAT_EXPONENT,
    MAX_FLOAT_PRECISION,
)
from ember.prims.serialize.reader import Field, describe, quote
from ember.prims.serialize.scalars import encode_int
from ember.prims.specs import symbol

_HEX = re.compile(r"-?0x[0-9a-f]+")
_MAX_HEX_DIGITS = MAX_FLOAT_PRECISION // 4 + 1


@dataclass(frozen=True)
class _Operator:
    """One operator of the tree: its sympy class, arity and the kind of its operands."""

    cls: type[sympy.Basic]
    build: Callable[..., sympy.Basic]
    min_args: int
    max_args: int | None  # None: any number from min_args up
    operands: str  # "expr", "boolean", or "same" (all Expr or all Boolean)


def _nary(cls: Any) -> Callable[..., sympy.Basic]:
    return lambda *args: cls(*args, evaluate=False)


# The expression set. Floor division is what sympy makes of `a // b`: floor(a * b**-1).
OPERATORS: dict[str, _Operator] = {
    "Add": _Operator(sympy.Add, _nary(sympy.Add), 2, None, "expr"),
    "Mul": _Operator(sympy.Mul, _nary(sympy.Mul), 2, None, "expr"),
    "Pow": _Operator(sympy.Pow, _nary(sympy.Pow), 2, 2, "expr"),
    "Mod": _Operator(sympy.Mod, _nary(sympy.Mod), 2, 2, "expr"),
    "floor": _Operator(sympy.floor, _nary(sympy.floor), 1, 1, "expr"),
    "ceiling": _Operator(sympy.ceiling, _nary(sympy.ceiling), 1, 1, "expr"),
    "Max": _Operator(sympy.Max, _nary(sympy.Max), 2, None, "expr"),
    "Min": _Operator(sympy.Min, _nary(sympy.Min), 2, None, "expr"),
    "Eq": _Operator(sympy.Eq, _nary(sympy.Eq), 2, 2, "same"),
    "Ne": _Operator(sympy.Ne, _nary(sympy.Ne), 2, 2, "same"),
    "Lt": _Operator(sympy.Lt, _nary(sympy.Lt), 2, 2, "expr"),
    "Le": _Operator(sympy.Le, _nary(sympy.Le), 2, 2, "expr"),
    "Gt": _Operator(sympy.Gt, _nary(sympy.Gt), 2, 2, "expr"),
    "Ge": _Operator(sympy.Ge, _nary(sympy.Ge), 2, 2, "expr"),
    "And": _Operator(sympy.And, _nary(sympy.And), 2, None, "boolean"),
    "Or": _Operator(sympy.Or, _nary(sympy.Or), 2, None, "boolean"),
    "Not": _Operator(sympy.Not, _nary(sympy.Not), 1, 1, "boolean"),
}
# Functions of symbolic floats (math.sin(x.size(0)) and the like); sqrt is a Pow, log(a, b)
# is log(a) * log(b)**-1.
for _function in (
    sympy.sin, sympy.cos, sympy.tan, sympy.asin, sympy.acos, sympy.atan,
    sympy.sinh, sympy.cosh, sympy.tanh, sympy.exp, sympy.log,
):  # fmt: skip
    OPERATORS[_function.__name__] = _Operator(_function, _nary(_function), 1, 1, "expr")
_OPERATOR_NAMES: dict[type, str] = {op.cls: name for name, op in OPERATORS.items()}

# Numbers without parameters.
_CONSTANTS: dict[str, sympy.Basic] = {
    "Infinity": sympy.oo,
    "NegativeInfinity": -sympy.oo,
    "NaN": sympy.nan,
    "Pi": sympy.pi,
    "E": sympy.E,
}
_CONSTANT_NAMES: dict[type, str] = {type(value): name for name, value in _CONSTANTS.items()}


# ---- encoding --------------------------------------------------------------------------------


def encode_expr(expr: sympy.Basic, path: str, depth: int = 0) -> Any:
    """The JSON tree of `expr`; GraphFormatError if it holds something outside the set."""
    if depth > MAX_EXPR_DEPTH:
        raise GraphFormatError(
            f"cannot serialize {path}: expression nested deeper than {MAX_EXPR_DEPTH}"
        )
    if isinstance(expr, sympy.Integer):
        return encode_int(int(expr), path)
    if isinstance(expr, sympy.Rational):
        return {"op": "Rational", "p": encode_int(expr.p, path), "q": encode_int(expr.q, path)}
    if isinstance(expr, sympy.Float):
        return _encode_float(expr, path)
    if type(expr) is sympy.Symbol:
        if expr != symbol(expr.name):
            raise GraphFormatError(
                f"cannot serialize {path}: symbol {expr.name!r} was not made by "
                "ember.prims.specs.symbol (its assumptions differ)"
            )
        return expr.name
    if isinstance(expr, BooleanTrue):
        return True
    if isinstance(expr, BooleanFalse):
        return False
    constant = _CONSTANT_NAMES.get(type(expr))
    if constant is not None:
        return {"op": constant}
    name = _OPERATOR_NAMES.get(type(expr))
    if name is None:
        raise GraphFormatError(
            f"cannot serialize {path}: sympy {type(expr).__name__} ({expr}) is not in the "
            "expression set of docs/graph-format.md"
        )
    if len(expr.args) > MAX_EXPR_ARGS:
        raise GraphFormatError(
            f"cannot serialize {path}: {name} of {len(expr.args)} operands (at most "
            f"{MAX_EXPR_ARGS})"
        )
    return {"op": name, "args": [encode_expr(arg, path, depth + 1) for arg in expr.args]}


def _encode_float(expr: sympy.Float, path: str) -> Any:
    sign, mantissa, exponent, _ = expr._mpf_
    precision = int(expr._prec)
    if not 1 <= precision <= MAX_FLOAT_PRECISION or abs(exponent) > MAX_FLOAT_EXPONENT:
        raise GraphFormatError(
            f"cannot serialize {path}: sympy Float {expr} is outside the format's range "
            f"(precision <= {MAX_FLOAT_PRECISION} bits, |exponent| <= {MAX_FLOAT_EXPONENT})"
        )
    signed = -int(mantissa) if sign else int(mantissa)
    return {"op": "Float", "mantissa": hex(signed), "exponent": exponent, "precision": precision}


# ---- decoding --------------------------------------------------------------------------------


def decode_expr(field: Field, symbols: Collection[str], depth: int = 0) -> sympy.Basic:
    """The sympy expression of a JSON tree; symbols must be among the declared `symbols`."""
    if depth > MAX_EXPR_DEPTH:
        field.fail(f"expression nested deeper than {MAX_EXPR_DEPTH}")
    value = field.value
    if isinstance(value, bool):
        return sympy.true if value else sympy.false
    if field.is_integer():
        return sympy.Integer(field.integer())
    if isinstance(value, str):
        if value not in symbols:
            field.fail(f"symbol {quote(value)} is not declared in the graph's symbols")
        return symbol(value)
    if not isinstance(value, dict) or not isinstance(value.get("op"), str):
        field.fail(
            "expected an expression: an integer, a symbol name, true/false or "
            f'{{"op": ...}}, got {describe(value)}'
        )
    op = value["op"]
    if op in _CONSTANTS:
        field.object(("op",))
        return _CONSTANTS[op]
    if op == "Rational":
        return _decode_rational(field)
    if op == "Float":
        return _decode_float(field)
    operator = OPERATORS.get(op)
    if operator is None:
        field.child(op, ".op").fail(f"unknown expression operator {quote(op)}")
    members = field.object(("op", "args"))
    items = members["args"].array()
    if len(items) > MAX_EXPR_ARGS:
        members["args"].fail(f"{len(items)} operands; at most {MAX_EXPR_ARGS} are allowed")
    if len(items) < operator.min_args or (
        operator.max_args is not None and len(items) > operator.max_args
    ):
        arity = (
            f"{operator.min_args}"
            if operator.max_args == operator.min_args
            else f"at least {operator.min_args}"
        )
        members["args"].fail(f"{op} takes {arity} operands, got {len(items)}")
    args = [decode_expr(item, symbols, depth + 1) for item in items]
    _check_operands(op, operator, items, args)
    try:
        return operator.build(*args)
    except Exception as error:  # sympy's constructors raise TypeError, ValueError, ...
        field.fail(f"sympy rejects {op} of these operands: {type(error).__name__}: {error}")


def _check_operands(
    op: str, operator: _Operator, items: list[Field], args: list[sympy.Basic]
) -> None:
    kinds = operator.operands
    if kinds == "same":
        kinds = "expr" if isinstance(args[0], sympy.Expr) else "boolean"
    for item, arg in zip(items, args):
        if kinds == "expr" and not isinstance(arg, sympy.Expr):
            item.fail(f"an operand of {op} must be a number expression, got {quote(str(arg))}")
        if kinds == "boolean" and not isinstance(arg, Boolean):
            item.fail(f"an operand of {op} must be a boolean expression, got {quote(str(arg))}")


def _decode_rational(field: Field) -> sympy.Basic:
    members = field.object(("op", "p", "q"))
    p = members["p"].integer()
    q = members["q"].integer(low=2)
    if math.gcd(p, q) != 1:
        field.fail(f"Rational {p}/{q} is not in lowest terms")
    return sympy.Rational(p, q)


def _decode_float(field: Field) -> sympy.Basic:
    members = field.object(("op", "mantissa", "exponent", "precision"))
    text = members["mantissa"].string()
    if len(text) > _MAX_HEX_DIGITS + 3 or _HEX.fullmatch(text) is None:
        members["mantissa"].fail("expected a hexadecimal integer like '-0x1b'")
    signed = int(text, 16)
    exponent = members["exponent"].integer(-MAX_FLOAT_EXPONENT, MAX_FLOAT_EXPONENT)
    precision = members["precision"].integer(1, MAX_FLOAT_PRECISION)
    mantissa = abs(signed)
    if mantissa == 0 and exponent != 0:
        field.fail("a zero Float has exponent 0")
    if mantissa != 0 and mantissa % 2 == 0:
        field.fail("a Float mantissa is odd (normalized) or zero")
    if mantissa.bit_length() > precision:
        field.fail(f"a mantissa of {mantissa.bit_length()} bits exceeds precision {precision}")
    if mantissa == 0:  # the mpf tuple of zero would come back as Integer 0
        return sympy.Float(0, precision=precision)
    mpf = (int(signed < 0), mantissa, exponent, mantissa.bit_length())
    return sympy.Float(mpf, precision=precision)
