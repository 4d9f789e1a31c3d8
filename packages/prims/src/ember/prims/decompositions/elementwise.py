"""ATen elementwise math, comparisons and logic written with elementwise prims.

Each ATen op promotes its operands (see operands.py), broadcasts them, calls one prim or a
short formula of prims, and converts to the result dtype. In-place forms (`add_`) compute the
same value and write it back with `copy_to`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from ember.prims.decompositions.operands import (
    Operand,
    broadcast,
    convert,
    result_type,
    scalar_like,
    to_float,
)
from ember.prims.decompositions.table import PRIM_DECOMPOSITIONS, to_prims
from ember.prims.primitives import Prim, prims

DEFAULT, INT_TO_FLOAT, ALWAYS_BOOL, BOOL_TO_LONG = "default", "int_to_float", "bool", "long"


def unary(prim: Prim, a: torch.Tensor, kind: str = DEFAULT) -> torch.Tensor:
    """prim applied to a, promoted as `kind` says."""
    dtype = a.dtype
    if kind == INT_TO_FLOAT:
        dtype = to_float(dtype)
    return prim(convert(a, dtype))


def binary(prim: Prim, a: Operand, b: Operand, kind: str = DEFAULT) -> torch.Tensor:
    """prim applied to a and b broadcast together, promoted as `kind` says."""
    dtype = result_type(a, b)
    if kind == INT_TO_FLOAT:
        dtype = to_float(dtype)
    x, y = broadcast(a, b, dtype=dtype)
    return prim(x, y)


def inplace(fn: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    """The in-place form of an op: compute, convert to self's dtype, write back into self."""

    def decomposition(self: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        value = fn(self, *args, **kwargs)
        if list(value.shape) != list(self.shape):
            value = broadcast(value, self, dtype=value.dtype)[0]
        return prims.copy_to(self, convert(value, self.dtype))

    return decomposition


def _register_with_inplace(name: str, overloads: tuple[str, ...], fn: Callable[..., Any]) -> None:
    for overload in overloads:
        to_prims(f"aten::{name}.{overload}")(fn)
        inplace_target = f"aten::{name}_.{overload}"
        if inplace_target not in PRIM_DECOMPOSITIONS:
            to_prims(inplace_target)(inplace(fn))


def _unary_decomposition(prim: Prim, kind: str) -> Callable[[torch.Tensor], torch.Tensor]:
    return lambda a: unary(prim, a, kind)


_UNARY_FLOAT = (
    "exp",
    "exp2",
    "expm1",
    "log",
    "log2",
    "log10",
    "log1p",
    "sqrt",
    "rsqrt",
    "reciprocal",
    "sin",
    "cos",
    "tan",
    "asin",
    "acos",
    "atan",
    "sinh",
    "cosh",
    "tanh",
    "asinh",
    "acosh",
    "atanh",
    "erf",
    "erfc",
    "erfinv",
    "lgamma",
    "digamma",
)
for _name in _UNARY_FLOAT:
    _register_with_inplace(
        _name, ("default",), _unary_decomposition(getattr(prims, _name), INT_TO_FLOAT)
    )
_ALIASES = {
    "arcsin": "asin",
    "arccos": "acos",
    "arctan": "atan",
    "arcsinh": "asinh",
    "arccosh": "acosh",
    "arctanh": "atanh",
    "special_expm1": "expm1",
}
for _alias, _name in _ALIASES.items():
    _register_with_inplace(
        _alias, ("default",), _unary_decomposition(getattr(prims, _name), INT_TO_FLOAT)
    )
for _name in ("abs", "neg", "bitwise_not"):
    _register_with_inplace(
        _name, ("default",), _unary_decomposition(getattr(prims, _name), DEFAULT)
    )
_register_with_inplace("negative", ("default",), _unary_decomposition(prims.neg, DEFAULT))
_register_with_inplace("absolute", ("default",), _unary_decomposition(prims.abs, DEFAULT))


def _sign(a: torch.Tensor) -> torch.Tensor:
    if a.dtype == torch.bool:
        return prims.clone(a)
    return prims.sign(a)


_register_with_inplace("sign", ("default",), _sign)
_register_with_inplace("sgn", ("default",), _sign)


def _rounding(prim: Prim) -> Callable[[torch.Tensor], torch.Tensor]:
    def decomposition(a: torch.Tensor) -> torch.Tensor:
        if not a.dtype.is_floating_point:
            return prims.clone(a)
        return prim(a)

    return decomposition


for _name in ("ceil", "floor", "trunc"):
    _register_with_inplace(_name, ("default",), _rounding(getattr(prims, _name)))
_register_with_inplace("fix", ("default",), _rounding(prims.trunc))
_register_with_inplace("round", ("default",), _rounding(prims.round))


@to_prims("aten::round.decimals")
def _round_decimals(a: torch.Tensor, *, decimals: int = 0) -> torch.Tensor:
    if decimals == 0:
        return _rounding(prims.round)(a)
    scale = 10.0**decimals
    return binary(prims.div, prims.round(binary(prims.mul, a, scale)), scale)


def _predicate(prim: Prim, integral_value: bool) -> Callable[[torch.Tensor], torch.Tensor]:
    def decomposition(a: torch.Tensor) -> torch.Tensor:
        if not (a.dtype.is_floating_point or a.dtype.is_complex):
            return prims.full(list(a.shape), integral_value, dtype=torch.bool, device=a.device)
        return prim(a)

    return decomposition


to_prims("aten::isnan.default")(_predicate(prims.isnan, False))
to_prims("aten::isinf.default")(_predicate(prims.isinf, False))
to_prims("aten::isfinite.default")(_predicate(prims.isfinite, True))
to_prims("aten::signbit.default")(
    lambda a: prims.signbit(a) if a.dtype.is_floating_point else binary(prims.lt, a, 0)
)


@to_prims("aten::isposinf.default")
def _isposinf(a: torch.Tensor) -> torch.Tensor:
    return (
        binary(prims.eq, a, math.inf)
        if a.dtype.is_floating_point
        else _predicate(prims.isinf, False)(a)
    )


@to_prims("aten::isneginf.default")
def _isneginf(a: torch.Tensor) -> torch.Tensor:
    return (
        binary(prims.eq, a, -math.inf)
        if a.dtype.is_floating_point
        else _predicate(prims.isinf, False)(a)
    )


@to_prims("aten::isreal.default")
def _isreal(a: torch.Tensor) -> torch.Tensor:
    return prims.full(list(a.shape), True, dtype=torch.bool, device=a.device)


# ---- binary arithmetic ---------------------------------------------------------------------


def _with_alpha(prim: Prim) -> Callable[..., torch.Tensor]:
    def decomposition(a: Operand, b: Operand, *, alpha: Any = 1) -> torch.Tensor:
        if alpha != 1:
            dtype = result_type(a, b)
            b = binary(
                prims.mul,
                convert(b, dtype) if isinstance(b, torch.Tensor) else b,
                alpha if not dtype.is_floating_point else float(alpha),
            )
            b = convert(b, dtype)
        return binary(prim, a, b)

    return decomposition


_register_with_inplace("add", ("Tensor", "Scalar"), _with_alpha(prims.add))
_register_with_inplace("sub", ("Tensor", "Scalar"), _with_alpha(prims.sub))
_register_with_inplace("subtract", ("Tensor", "Scalar"), _with_alpha(prims.sub))


@to_prims("aten::rsub.Tensor", "aten::rsub.Scalar")
def _rsub(a: Operand, b: Operand, *, alpha: Any = 1) -> torch.Tensor:
    return _with_alpha(prims.sub)(b, a, alpha=alpha)


def _binary_decomposition(prim: Prim, kind: str = DEFAULT) -> Callable[..., torch.Tensor]:
    return lambda a, b: binary(prim, a, b, kind)


_BINARY = {
    "mul": (prims.mul, DEFAULT),
    "multiply": (prims.mul, DEFAULT),
    "remainder": (prims.remainder, DEFAULT),
    "fmod": (prims.fmod, DEFAULT),
    "atan2": (prims.atan2, INT_TO_FLOAT),
    "arctan2": (prims.atan2, INT_TO_FLOAT),
    "hypot": (prims.hypot, DEFAULT),
    "copysign": (prims.copysign, INT_TO_FLOAT),
    "nextafter": (prims.nextafter, DEFAULT),
    "maximum": (prims.maximum, DEFAULT),
    "minimum": (prims.minimum, DEFAULT),
    "max": (prims.maximum, DEFAULT),
    "min": (prims.minimum, DEFAULT),
    "bitwise_and": (prims.bitwise_and, DEFAULT),
    "bitwise_or": (prims.bitwise_or, DEFAULT),
    "bitwise_xor": (prims.bitwise_xor, DEFAULT),
    "bitwise_left_shift": (prims.shift_left, DEFAULT),
    "bitwise_right_shift": (prims.shift_right, DEFAULT),
    "__lshift__": (prims.shift_left, DEFAULT),
    "__rshift__": (prims.shift_right, DEFAULT),
    "eq": (prims.eq, DEFAULT),
    "ne": (prims.ne, DEFAULT),
    "lt": (prims.lt, DEFAULT),
    "le": (prims.le, DEFAULT),
    "gt": (prims.gt, DEFAULT),
    "ge": (prims.ge, DEFAULT),
    "not_equal": (prims.ne, DEFAULT),
    "less": (prims.lt, DEFAULT),
    "less_equal": (prims.le, DEFAULT),
    "greater": (prims.gt, DEFAULT),
    "greater_equal": (prims.ge, DEFAULT),
}
for _name, (_prim, _kind) in _BINARY.items():
    overloads = (
        ("Tensor", "Scalar")
        if _name
        not in ("maximum", "minimum", "nextafter", "hypot", "atan2", "arctan2", "max", "min")
        else ("default",)
        if _name not in ("max", "min")
        else ("other",)
    )
    if _name in ("bitwise_left_shift", "bitwise_right_shift"):
        overloads = ("Tensor", "Tensor_Scalar")
    if _name in ("__lshift__", "__rshift__"):
        overloads = ("Tensor", "Scalar")
    _register_with_inplace(_name, overloads, _binary_decomposition(_prim, _kind))


def _true_divide(a: Operand, b: Operand) -> torch.Tensor:
    return binary(prims.div, a, b, INT_TO_FLOAT)


def floor_divide(a: Operand, b: Operand) -> torch.Tensor:
    """Python's a // b: floor of the quotient, computed as torch does for floats."""
    dtype = result_type(a, b)
    x, y = broadcast(a, b, dtype=dtype)
    if not dtype.is_floating_point:
        remainder = prims.remainder(x, y)
        return prims.div(prims.sub(x, remainder), y)
    mod = prims.fmod(x, y)
    quotient = prims.div(prims.sub(x, mod), y)
    zero = scalar_like(0, x)
    adjust = prims.bitwise_and(
        prims.ne(mod, zero), prims.ne(prims.lt(y, zero), prims.lt(mod, zero))
    )
    quotient = prims.where(adjust, prims.sub(quotient, scalar_like(1, x)), quotient)
    floored = prims.floor(quotient)
    bump = prims.gt(prims.sub(quotient, floored), scalar_like(0.5, x))
    floored = prims.where(bump, prims.add(floored, scalar_like(1, x)), floored)
    exact = prims.div(x, y)
    floored = prims.where(prims.eq(quotient, zero), prims.copysign(zero, exact), floored)
    return prims.where(prims.eq(y, zero), exact, floored)


def _div_mode(a: Operand, b: Operand, *, rounding_mode: str | None = None) -> torch.Tensor:
    if rounding_mode is None:
        return _true_divide(a, b)
    if rounding_mode == "trunc":
        dtype = result_type(a, b)
        if dtype.is_floating_point:
            return prims.trunc(binary(prims.div, a, b))
        return binary(prims.div, a, b)
    return floor_divide(a, b)


_register_with_inplace("div", ("Tensor", "Scalar"), _true_divide)
_register_with_inplace("divide", ("Tensor", "Scalar"), _true_divide)
_register_with_inplace("true_divide", ("Tensor", "Scalar"), _true_divide)
_register_with_inplace("div", ("Tensor_mode", "Scalar_mode"), _div_mode)
_register_with_inplace("divide", ("Tensor_mode", "Scalar_mode"), _div_mode)
_register_with_inplace("floor_divide", ("default", "Scalar"), floor_divide)


def _pow(a: Operand, b: Operand) -> torch.Tensor:
    squaring = isinstance(a, torch.Tensor) and not isinstance(b, torch.Tensor) and b == 2
    if squaring and a.dtype.is_floating_point:
        return prims.mul(a, a)
    return binary(prims.pow, a, b)


_register_with_inplace("pow", ("Tensor_Tensor", "Tensor_Scalar", "Scalar"), _pow)


@to_prims(
    "aten::float_power.Tensor_Tensor", "aten::float_power.Tensor_Scalar", "aten::float_power.Scalar"
)
def _float_power(a: Operand, b: Operand) -> torch.Tensor:
    x, y = broadcast(a, b, dtype=torch.float64)
    return prims.pow(x, y)


@to_prims("aten::square.default")
def _square(a: torch.Tensor) -> torch.Tensor:
    if a.dtype == torch.bool:
        a = convert(a, torch.int64)
    return prims.mul(a, a)


def _nan_ignoring(prim: Prim) -> Callable[[Operand, Operand], torch.Tensor]:
    def decomposition(a: Operand, b: Operand) -> torch.Tensor:
        x, y = broadcast(a, b)
        if not x.dtype.is_floating_point:
            return prim(x, y)
        both = prim(x, y)
        return prims.where(prims.isnan(x), y, prims.where(prims.isnan(y), x, both))

    return decomposition


PRIM_DECOMPOSITIONS["aten::fmax.default"] = _nan_ignoring(prims.maximum)
PRIM_DECOMPOSITIONS["aten::fmin.default"] = _nan_ignoring(prims.minimum)


def _logical(prim: Prim) -> Callable[[Operand, Operand], torch.Tensor]:
    def decomposition(a: Operand, b: Operand) -> torch.Tensor:
        x, y = broadcast(a, b)
        return prim(_truth(x), _truth(y))

    return decomposition


def _truth(x: torch.Tensor) -> torch.Tensor:
    return x if x.dtype == torch.bool else prims.ne(x, scalar_like(0, x))


for _name, _prim in (
    ("logical_and", prims.bitwise_and),
    ("logical_or", prims.bitwise_or),
    ("logical_xor", prims.bitwise_xor),
):
    to_prims(f"aten::{_name}.default")(_logical(_prim))
    to_prims(f"aten::{_name}_.default")(inplace(_logical(_prim)))


@to_prims("aten::logical_not.default")
def _logical_not(a: torch.Tensor) -> torch.Tensor:
    return prims.bitwise_not(_truth(a))


to_prims("aten::logical_not_.default")(inplace(_logical_not))


@to_prims("aten::ldexp.Tensor")
def _ldexp(a: Operand, b: Operand) -> torch.Tensor:
    x, y = broadcast(a, b, dtype=to_float(result_type(a, b)))
    return prims.mul(x, prims.exp2(y))


@to_prims("aten::frexp.Tensor")
def _frexp(a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """a = mantissa * 2**exponent with 0.5 <= |mantissa| < 1 (0, inf and NaN: exponent 0)."""
    x = prims.convert_element_type(a, torch.float64)
    zero = scalar_like(0, x)
    regular = prims.bitwise_and(prims.isfinite(x), prims.ne(x, zero))
    magnitude = prims.where(regular, prims.abs(x), scalar_like(1, x))
    exponent = prims.add(prims.floor(prims.log2(magnitude)), scalar_like(1, x))
    # log2 can be off by one next to powers of two: correct so that 0.5 <= m < 1
    for _ in range(2):
        scaled = prims.div(magnitude, prims.exp2(exponent))
        exponent = prims.add(
            exponent, prims.convert_element_type(prims.ge(scaled, scalar_like(1, x)), torch.float64)
        )
        scaled = prims.div(magnitude, prims.exp2(exponent))
        exponent = prims.sub(
            exponent,
            prims.convert_element_type(prims.lt(scaled, scalar_like(0.5, x)), torch.float64),
        )
    exponent = prims.where(regular, exponent, zero)
    mantissa = prims.div(x, prims.exp2(exponent))
    return (
        prims.convert_element_type(mantissa, a.dtype),
        prims.convert_element_type(exponent, torch.int32),
    )
