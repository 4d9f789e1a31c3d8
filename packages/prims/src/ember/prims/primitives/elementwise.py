"""Elementwise prims: unary and binary math, comparisons, bitwise logic, where, conversion.

Operands of one elementwise prim have exactly the same shape and (except `where`'s
predicate) the same dtype: broadcasting and type promotion are explicit in decompositions.
Results are new contiguous tensors.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ember.prims.primitives.prim import Prim, define

FAMILY = "elementwise"

_FLOAT = "float"  # the operands must be floating point
_INTEGRAL = "integral"  # the operands must be integers or bool
_ANY = "any"


def _check_category(name: str, dtype: torch.dtype, category: str) -> None:
    if category == _FLOAT and not (dtype.is_floating_point or dtype.is_complex):
        raise TypeError(f"prims::{name} takes floating point operands, got {dtype}")
    if category == _INTEGRAL and (dtype.is_floating_point or dtype.is_complex):
        raise TypeError(f"prims::{name} takes integer or bool operands, got {dtype}")


def _same(name: str, *tensors: torch.Tensor) -> None:
    first = tensors[0]
    for other in tensors[1:]:
        if other.shape != first.shape:
            raise ValueError(
                f"prims::{name} operands differ in shape: {first.shape} vs {other.shape}"
            )
        if other.dtype != first.dtype:
            raise TypeError(
                f"prims::{name} operands differ in dtype: {first.dtype} vs {other.dtype}"
            )


def _unary(
    name: str, fn: Callable[[torch.Tensor], torch.Tensor], category: str, to_bool: bool, doc: str
) -> Prim:
    def meta(a: torch.Tensor) -> torch.Tensor:
        _check_category(name, a.dtype, category)
        return torch.empty(a.shape, dtype=torch.bool if to_bool else a.dtype, device="meta")

    def impl(a: torch.Tensor) -> torch.Tensor:
        return fn(a).contiguous()

    return define(name, "(Tensor a) -> Tensor", meta, impl, family=FAMILY, doc=doc)


def _binary(
    name: str,
    fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    category: str,
    to_bool: bool,
    doc: str,
) -> Prim:
    def meta(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        _same(name, a, b)
        _check_category(name, a.dtype, category)
        return torch.empty(a.shape, dtype=torch.bool if to_bool else a.dtype, device="meta")

    def impl(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return fn(a, b).contiguous()

    return define(name, "(Tensor a, Tensor b) -> Tensor", meta, impl, family=FAMILY, doc=doc)


# name: (reference, operand category, result is bool, semantics)
UNARY: dict[str, tuple[Callable[[torch.Tensor], torch.Tensor], str, bool, str]] = {
    "abs": (torch.abs, _ANY, False, "absolute value |a|"),
    "neg": (torch.neg, _ANY, False, "-a (wraps for integers)"),
    "sign": (torch.sign, _ANY, False, "-1, 0 or 1 by the sign of a (NaN stays NaN)"),
    "signbit": (torch.signbit, _FLOAT, True, "whether the sign bit is set (true for -0.0)"),
    "exp": (torch.exp, _FLOAT, False, "e**a"),
    "exp2": (torch.exp2, _FLOAT, False, "2**a"),
    "expm1": (torch.expm1, _FLOAT, False, "e**a - 1, accurate near 0"),
    "log": (torch.log, _FLOAT, False, "natural logarithm; -inf at 0, NaN below"),
    "log2": (torch.log2, _FLOAT, False, "base-2 logarithm"),
    "log10": (torch.log10, _FLOAT, False, "base-10 logarithm"),
    "log1p": (torch.log1p, _FLOAT, False, "log(1 + a), accurate near 0"),
    "sqrt": (torch.sqrt, _FLOAT, False, "square root; NaN below 0"),
    "rsqrt": (torch.rsqrt, _FLOAT, False, "1 / sqrt(a)"),
    "reciprocal": (torch.reciprocal, _FLOAT, False, "1 / a"),
    "sin": (torch.sin, _FLOAT, False, "sine (radians)"),
    "cos": (torch.cos, _FLOAT, False, "cosine (radians)"),
    "tan": (torch.tan, _FLOAT, False, "tangent (radians)"),
    "asin": (torch.asin, _FLOAT, False, "arc sine"),
    "acos": (torch.acos, _FLOAT, False, "arc cosine"),
    "atan": (torch.atan, _FLOAT, False, "arc tangent"),
    "sinh": (torch.sinh, _FLOAT, False, "hyperbolic sine"),
    "cosh": (torch.cosh, _FLOAT, False, "hyperbolic cosine"),
    "tanh": (torch.tanh, _FLOAT, False, "hyperbolic tangent"),
    "asinh": (torch.asinh, _FLOAT, False, "inverse hyperbolic sine"),
    "acosh": (torch.acosh, _FLOAT, False, "inverse hyperbolic cosine"),
    "atanh": (torch.atanh, _FLOAT, False, "inverse hyperbolic tangent"),
    "erf": (torch.erf, _FLOAT, False, "error function"),
    "erfc": (torch.erfc, _FLOAT, False, "1 - erf(a), accurate for large a"),
    "erfinv": (torch.erfinv, _FLOAT, False, "inverse error function on (-1, 1)"),
    "lgamma": (torch.lgamma, _FLOAT, False, "log |Gamma(a)|"),
    "digamma": (torch.digamma, _FLOAT, False, "d/da log Gamma(a); inf or NaN at the poles"),
    "ceil": (torch.ceil, _FLOAT, False, "smallest integer >= a"),
    "floor": (torch.floor, _FLOAT, False, "largest integer <= a"),
    "round": (torch.round, _FLOAT, False, "nearest integer, halves to even"),
    "trunc": (torch.trunc, _FLOAT, False, "integer part, toward zero"),
    "isnan": (torch.isnan, _ANY, True, "whether a is NaN"),
    "isinf": (torch.isinf, _ANY, True, "whether a is +inf or -inf"),
    "isfinite": (torch.isfinite, _ANY, True, "whether a is neither NaN nor infinite"),
    "bitwise_not": (torch.bitwise_not, _INTEGRAL, False, "~a (logical not for bool)"),
}


def _div(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    if a.dtype.is_floating_point or a.dtype.is_complex:
        return torch.div(a, b)
    return torch.div(a, b, rounding_mode="trunc")


BINARY: dict[str, tuple[Callable[[torch.Tensor, torch.Tensor], torch.Tensor], str, bool, str]] = {
    "add": (torch.add, _ANY, False, "a + b (integers wrap; bool is logical or)"),
    "sub": (torch.sub, _ANY, False, "a - b"),
    "mul": (torch.mul, _ANY, False, "a * b (bool is logical and)"),
    "div": (_div, _ANY, False, "a / b: true division for floats, truncation toward 0 for integers"),
    "remainder": (torch.remainder, _ANY, False, "a - floor(a / b) * b: the sign of b (Python %)"),
    "fmod": (torch.fmod, _ANY, False, "a - trunc(a / b) * b: the sign of a (C fmod)"),
    "pow": (torch.pow, _ANY, False, "a ** b"),
    "atan2": (torch.atan2, _FLOAT, False, "angle of the point (b, a), in (-pi, pi]"),
    "hypot": (torch.hypot, _FLOAT, False, "sqrt(a*a + b*b) without overflow"),
    "copysign": (torch.copysign, _FLOAT, False, "|a| with the sign of b"),
    "nextafter": (torch.nextafter, _FLOAT, False, "next representable value after a toward b"),
    "maximum": (torch.maximum, _ANY, False, "larger of a and b; NaN if either is NaN"),
    "minimum": (torch.minimum, _ANY, False, "smaller of a and b; NaN if either is NaN"),
    "bitwise_and": (torch.bitwise_and, _INTEGRAL, False, "a & b"),
    "bitwise_or": (torch.bitwise_or, _INTEGRAL, False, "a | b"),
    "bitwise_xor": (torch.bitwise_xor, _INTEGRAL, False, "a ^ b"),
    "shift_left": (torch.bitwise_left_shift, _INTEGRAL, False, "a << b"),
    "shift_right": (torch.bitwise_right_shift, _INTEGRAL, False, "a >> b (arithmetic)"),
    "eq": (torch.eq, _ANY, True, "a == b"),
    "ne": (torch.ne, _ANY, True, "a != b (true where either is NaN)"),
    "lt": (torch.lt, _ANY, True, "a < b"),
    "le": (torch.le, _ANY, True, "a <= b"),
    "gt": (torch.gt, _ANY, True, "a > b"),
    "ge": (torch.ge, _ANY, True, "a >= b"),
}

for _name, (_fn, _category, _to_bool, _doc) in UNARY.items():
    _unary(_name, _fn, _category, _to_bool, _doc)
for _name, (_fn, _category, _to_bool, _doc) in BINARY.items():
    _binary(_name, _fn, _category, _to_bool, _doc)


def _where_meta(pred: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    if pred.dtype != torch.bool:
        raise TypeError(f"prims::where takes a bool predicate, got {pred.dtype}")
    if pred.shape != a.shape:
        raise ValueError(f"prims::where predicate shape {pred.shape} differs from {a.shape}")
    _same("where", a, b)
    return torch.empty(a.shape, dtype=a.dtype, device="meta")


define(
    "where",
    "(Tensor pred, Tensor a, Tensor b) -> Tensor",
    _where_meta,
    lambda pred, a, b: torch.where(pred, a, b).contiguous(),
    family=FAMILY,
    doc="a where pred is true, else b; all three of one shape, a and b of one dtype",
)


def _convert_meta(a: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return torch.empty(a.shape, dtype=dtype, device="meta")


define(
    "convert_element_type",
    "(Tensor a, ScalarType dtype) -> Tensor",
    _convert_meta,
    lambda a, dtype: a.to(dtype, copy=True).contiguous(),
    family=FAMILY,
    doc="a converted to dtype: floats to integers truncate toward 0, nonzero to bool is true",
)
