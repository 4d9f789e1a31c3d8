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

FLOAT = "float"  # the operands must be floating point
INTEGRAL = "integral"  # the operands must be integers or bool
ANY = "any"


def _check_category(name: str, dtype: torch.dtype, category: str) -> None:
    if category == FLOAT and not (dtype.is_floating_point or dtype.is_complex):
        raise TypeError(f"prims::{name} takes floating point operands, got {dtype}")
    if category == INTEGRAL and (dtype.is_floating_point or dtype.is_complex):
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


def define_unary(
    name: str,
    fn: Callable[[torch.Tensor], torch.Tensor],
    category: str,
    to_bool: bool,
    doc: str,
    family: str = FAMILY,
) -> Prim:
    """Define an elementwise prim of one operand (see the module docstring for the rules)."""

    def meta(a: torch.Tensor) -> torch.Tensor:
        _check_category(name, a.dtype, category)
        return torch.empty(a.shape, dtype=torch.bool if to_bool else a.dtype, device="meta")

    def impl(a: torch.Tensor) -> torch.Tensor:
        return fn(a).contiguous()

    return define(name, "(Tensor a) -> Tensor", meta, impl, family=family, doc=doc)


def define_binary(
    name: str,
    fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    category: str,
    to_bool: bool,
    doc: str,
    family: str = FAMILY,
) -> Prim:
    """Define an elementwise prim of two operands of one shape and dtype."""

    def meta(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        _same(name, a, b)
        _check_category(name, a.dtype, category)
        return torch.empty(a.shape, dtype=torch.bool if to_bool else a.dtype, device="meta")

    def impl(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return fn(a, b).contiguous()

    return define(name, "(Tensor a, Tensor b) -> Tensor", meta, impl, family=family, doc=doc)


# name: (reference, operand category, result is bool, semantics)
UNARY: dict[str, tuple[Callable[[torch.Tensor], torch.Tensor], str, bool, str]] = {
    "abs": (torch.abs, ANY, False, "absolute value |a|"),
    "neg": (torch.neg, ANY, False, "-a (wraps for integers)"),
    "sign": (torch.sign, ANY, False, "-1, 0 or 1 by the sign of a (NaN stays NaN)"),
    "signbit": (torch.signbit, FLOAT, True, "whether the sign bit is set (true for -0.0)"),
    "exp": (torch.exp, FLOAT, False, "e**a"),
    "exp2": (torch.exp2, FLOAT, False, "2**a"),
    "expm1": (torch.expm1, FLOAT, False, "e**a - 1, accurate near 0"),
    "log": (torch.log, FLOAT, False, "natural logarithm; -inf at 0, NaN below"),
    "log2": (torch.log2, FLOAT, False, "base-2 logarithm"),
    "log10": (torch.log10, FLOAT, False, "base-10 logarithm"),
    "log1p": (torch.log1p, FLOAT, False, "log(1 + a), accurate near 0"),
    "sqrt": (torch.sqrt, FLOAT, False, "square root; NaN below 0"),
    "rsqrt": (torch.rsqrt, FLOAT, False, "1 / sqrt(a)"),
    "reciprocal": (torch.reciprocal, FLOAT, False, "1 / a"),
    "sin": (torch.sin, FLOAT, False, "sine (radians)"),
    "cos": (torch.cos, FLOAT, False, "cosine (radians)"),
    "tan": (torch.tan, FLOAT, False, "tangent (radians)"),
    "asin": (torch.asin, FLOAT, False, "arc sine"),
    "acos": (torch.acos, FLOAT, False, "arc cosine"),
    "atan": (torch.atan, FLOAT, False, "arc tangent"),
    "sinh": (torch.sinh, FLOAT, False, "hyperbolic sine"),
    "cosh": (torch.cosh, FLOAT, False, "hyperbolic cosine"),
    "tanh": (torch.tanh, FLOAT, False, "hyperbolic tangent"),
    "asinh": (torch.asinh, FLOAT, False, "inverse hyperbolic sine"),
    "acosh": (torch.acosh, FLOAT, False, "inverse hyperbolic cosine"),
    "atanh": (torch.atanh, FLOAT, False, "inverse hyperbolic tangent"),
    "erf": (torch.erf, FLOAT, False, "error function"),
    "erfc": (torch.erfc, FLOAT, False, "1 - erf(a), accurate for large a"),
    "erfinv": (torch.erfinv, FLOAT, False, "inverse error function on (-1, 1)"),
    "lgamma": (torch.lgamma, FLOAT, False, "log |Gamma(a)|"),
    "digamma": (torch.digamma, FLOAT, False, "d/da log Gamma(a); inf or NaN at the poles"),
    "ceil": (torch.ceil, FLOAT, False, "smallest integer >= a"),
    "floor": (torch.floor, FLOAT, False, "largest integer <= a"),
    "round": (torch.round, FLOAT, False, "nearest integer, halves to even"),
    "trunc": (torch.trunc, FLOAT, False, "integer part, toward zero"),
    "isnan": (torch.isnan, ANY, True, "whether a is NaN"),
    "isinf": (torch.isinf, ANY, True, "whether a is +inf or -inf"),
    "isfinite": (torch.isfinite, ANY, True, "whether a is neither NaN nor infinite"),
    "bitwise_not": (torch.bitwise_not, INTEGRAL, False, "~a (logical not for bool)"),
}


def _div(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    if a.dtype.is_floating_point or a.dtype.is_complex:
        return torch.div(a, b)
    return torch.div(a, b, rounding_mode="trunc")


BINARY: dict[str, tuple[Callable[[torch.Tensor, torch.Tensor], torch.Tensor], str, bool, str]] = {
    "add": (torch.add, ANY, False, "a + b (integers wrap; bool is logical or)"),
    "sub": (torch.sub, ANY, False, "a - b"),
    "mul": (torch.mul, ANY, False, "a * b (bool is logical and)"),
    "div": (_div, ANY, False, "a / b: true division for floats, truncation toward 0 for integers"),
    "remainder": (torch.remainder, ANY, False, "a - floor(a / b) * b: the sign of b (Python %)"),
    "fmod": (torch.fmod, ANY, False, "a - trunc(a / b) * b: the sign of a (C fmod)"),
    "pow": (torch.pow, ANY, False, "a ** b"),
    "atan2": (torch.atan2, FLOAT, False, "angle of the point (b, a), in (-pi, pi]"),
    "hypot": (torch.hypot, FLOAT, False, "sqrt(a*a + b*b) without overflow"),
    "copysign": (torch.copysign, FLOAT, False, "|a| with the sign of b"),
    "nextafter": (torch.nextafter, FLOAT, False, "next representable value after a toward b"),
    "maximum": (torch.maximum, ANY, False, "larger of a and b; NaN if either is NaN"),
    "minimum": (torch.minimum, ANY, False, "smaller of a and b; NaN if either is NaN"),
    "bitwise_and": (torch.bitwise_and, INTEGRAL, False, "a & b"),
    "bitwise_or": (torch.bitwise_or, INTEGRAL, False, "a | b"),
    "bitwise_xor": (torch.bitwise_xor, INTEGRAL, False, "a ^ b"),
    "shift_left": (torch.bitwise_left_shift, INTEGRAL, False, "a << b"),
    "shift_right": (torch.bitwise_right_shift, INTEGRAL, False, "a >> b (arithmetic)"),
    "eq": (torch.eq, ANY, True, "a == b"),
    "ne": (torch.ne, ANY, True, "a != b (true where either is NaN)"),
    "lt": (torch.lt, ANY, True, "a < b"),
    "le": (torch.le, ANY, True, "a <= b"),
    "gt": (torch.gt, ANY, True, "a > b"),
    "ge": (torch.ge, ANY, True, "a >= b"),
}

for _name, (_fn, _category, _to_bool, _doc) in UNARY.items():
    define_unary(_name, _fn, _category, _to_bool, _doc)
for _name, (_binary_fn, _category, _to_bool, _doc) in BINARY.items():
    define_binary(_name, _binary_fn, _category, _to_bool, _doc)


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
