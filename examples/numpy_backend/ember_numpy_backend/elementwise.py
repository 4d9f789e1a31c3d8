"""Kernels of the elementwise prims: math, comparisons, bitwise logic, where, conversion.

Operands arrive with one shape and one dtype (decompositions made promotion and broadcasting
explicit), so each kernel is one NumPy call; the backend casts every result to the dtype the
Graph declares.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ember_numpy_backend.kernels import kernel
from ember_numpy_backend.scalar_math import digamma, erfinv, lgamma, vectorized

Array = Any  # numpy.ndarray

_UNARY: dict[str, Callable[[Array], Array]] = {
    "abs": np.abs,
    "neg": np.negative,
    "sign": np.sign,
    "signbit": np.signbit,
    "exp": np.exp,
    "exp2": np.exp2,
    "expm1": np.expm1,
    "log": np.log,
    "log2": np.log2,
    "log10": np.log10,
    "log1p": np.log1p,
    "sqrt": np.sqrt,
    "rsqrt": lambda a: np.reciprocal(np.sqrt(a)),
    "reciprocal": np.reciprocal,
    "sin": np.sin,
    "cos": np.cos,
    "tan": np.tan,
    "asin": np.arcsin,
    "acos": np.arccos,
    "atan": np.arctan,
    "sinh": np.sinh,
    "cosh": np.cosh,
    "tanh": np.tanh,
    "asinh": np.arcsinh,
    "acosh": np.arccosh,
    "atanh": np.arctanh,
    "erf": vectorized(__import__("math").erf),
    "erfc": vectorized(__import__("math").erfc),
    "erfinv": vectorized(erfinv),
    "lgamma": vectorized(lgamma),
    "digamma": vectorized(digamma),
    "ceil": np.ceil,
    "floor": np.floor,
    "round": np.round,  # halves to even, as torch.round
    "trunc": np.trunc,
    "isnan": np.isnan,
    "isinf": np.isinf,
    "isfinite": np.isfinite,
    "bitwise_not": np.invert,
}


def _integral(a: Array) -> bool:
    return a.dtype.kind in "biu"


def _div(a: Array, b: Array) -> Array:
    if not _integral(a):
        return np.true_divide(a, b)
    quotient = np.abs(a) // np.abs(b)  # truncation toward zero
    return np.where((a < 0) != (b < 0), -quotient, quotient)


def _remainder(a: Array, b: Array) -> Array:
    return np.remainder(a, b)  # the sign of b, as Python's %


def _fmod(a: Array, b: Array) -> Array:
    return np.fmod(a, b)


def _pow(a: Array, b: Array) -> Array:
    if _integral(a) and a.dtype != np.bool_:
        return np.power(a, np.maximum(b, 0))  # torch: negative integer exponents are an error
    return np.power(a, b)


def _shift_right(a: Array, b: Array) -> Array:
    return np.right_shift(a, b)


_BINARY: dict[str, Callable[[Array, Array], Array]] = {
    "add": lambda a, b: np.logical_or(a, b) if a.dtype == np.bool_ else np.add(a, b),
    "sub": np.subtract,
    "mul": lambda a, b: np.logical_and(a, b) if a.dtype == np.bool_ else np.multiply(a, b),
    "div": _div,
    "remainder": _remainder,
    "fmod": _fmod,
    "pow": _pow,
    "atan2": np.arctan2,
    "hypot": np.hypot,
    "copysign": np.copysign,
    "nextafter": np.nextafter,
    "maximum": np.maximum,  # NaN propagates, as torch.maximum
    "minimum": np.minimum,
    "bitwise_and": np.bitwise_and,
    "bitwise_or": np.bitwise_or,
    "bitwise_xor": np.bitwise_xor,
    "shift_left": np.left_shift,
    "shift_right": _shift_right,
    "eq": np.equal,
    "ne": np.not_equal,
    "lt": np.less,
    "le": np.less_equal,
    "gt": np.greater,
    "ge": np.greater_equal,
}

for _name, _fn in _UNARY.items():
    kernel(_name)(_fn)
for _name, _binary_fn in _BINARY.items():
    kernel(_name)(_binary_fn)


@kernel("where")
def _where(pred: Array, a: Array, b: Array) -> Array:
    return np.where(pred, a, b)


@kernel("convert_element_type")
def _convert(a: Array, dtype: np.dtype[Any]) -> Array:
    if dtype == np.bool_:
        return a != 0  # NaN is nonzero: true, as torch
    with np.errstate(invalid="ignore"):
        return a.astype(dtype)  # floats to integers truncate toward zero
