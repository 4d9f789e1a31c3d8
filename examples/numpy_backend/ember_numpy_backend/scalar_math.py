"""Scalar special functions NumPy lacks (erfinv, lgamma at the poles, digamma), written with
Python's `math` module, and `vectorized` to apply one elementwise over an array.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np


def vectorized(fn: Callable[[float], float]) -> Callable[[Any], Any]:
    """fn applied to every element (computed in float64; the backend casts the result)."""
    ufunc = np.vectorize(fn, otypes=[np.float64])

    def apply(a: Any) -> Any:
        return ufunc(a.astype(np.float64)) if a.size else a.astype(np.float64)

    return apply


def lgamma(x: float) -> float:
    """log |Gamma(x)|, +inf at the poles (0, -1, -2, ...)."""
    if math.isnan(x):
        return x
    try:
        return math.lgamma(x)
    except ValueError:
        return math.inf


def digamma(x: float) -> float:
    """d/dx log Gamma(x): reflection below 0, recurrence up to 6, then the asymptotic series."""
    if math.isnan(x) or x == -math.inf:
        return math.nan
    if x == 0:
        return -math.inf
    if x < 0:
        if x == math.floor(x):
            return math.nan
        return digamma(1 - x) - math.pi / math.tan(math.pi * x)
    result = 0.0
    while x < 6:
        result -= 1 / x
        x += 1
    inverse = 1 / (x * x)
    series = inverse * (
        1 / 12 - inverse * (1 / 120 - inverse * (1 / 252 - inverse * (1 / 240 - inverse / 132)))
    )
    return result + math.log(x) - 0.5 / x - series


def erfinv(y: float) -> float:
    """The inverse of erf on (-1, 1): Giles' approximation refined by Newton steps."""
    if math.isnan(y) or abs(y) > 1:
        return math.nan
    if abs(y) == 1:
        return math.copysign(math.inf, y)
    w = -math.log((1 - y) * (1 + y))
    if w < 5:
        w -= 2.5
        p = 2.81022636e-08
        for c in (
            3.43273939e-07,
            -3.5233877e-06,
            -4.39150654e-06,
            0.00021858087,
            -0.00125372503,
            -0.00417768164,
            0.246640727,
            1.50140941,
        ):
            p = c + p * w
    else:
        w = math.sqrt(w) - 3
        p = -0.000200214257
        for c in (
            0.000100950558,
            0.00134934322,
            -0.00367342844,
            0.00573950773,
            -0.0076224613,
            0.00943887047,
            1.00167406,
            2.83297682,
        ):
            p = c + p * w
    x = p * y
    for _ in range(2):  # Newton on erf(x) - y
        x -= (math.erf(x) - y) / (2 / math.sqrt(math.pi) * math.exp(-x * x))
    return x
