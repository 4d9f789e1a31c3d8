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


# Euler-Maclaurin coefficients (2k)! / B_2k, as Cephes' zeta uses them
_ZETA_A = (
    12.0, -720.0, 30240.0, -1209600.0, 47900160.0, -1.8924375803183791606e9, 7.47242496e10,
    -2.950130727918164224e12, 1.1646782814350067249e14, -4.5979787224074726105e15,
    1.8152105401943546773e17, -7.1661652561756670113e18,
)  # fmt: skip


def zeta(x: float, q: float) -> float:
    """Hurwitz zeta: sum over k >= 0 of (k + q) ** -x, for x > 1 (Euler-Maclaurin)."""
    if math.isnan(x) or math.isnan(q):
        return math.nan
    if x == 1:
        return math.inf
    if x < 1:
        return math.nan
    if q <= 0:
        if q == math.floor(q):
            return math.inf
        if x != math.floor(x):
            return math.nan  # q ** -x is not real
    total = q**-x
    a, i, b = q, 0, 0.0
    while i < 9 or a <= 9:
        i += 1
        a += 1
        b = a**-x
        total += b
        if abs(b / total) < 1e-17:
            return total
    w = a
    total += b * w / (x - 1) - 0.5 * b
    factor, k = 1.0, 0.0
    for coefficient in _ZETA_A:
        factor *= x + k
        b /= w
        term = factor * b / coefficient
        total += term
        if abs(term / total) < 1e-17:
            break
        k += 1
        factor *= x + k
        b /= w
        k += 1
    return total


def polygamma(n: int, x: float) -> float:
    if n == 0:
        return digamma(x)
    return (-1) ** (n + 1) * math.factorial(n) * zeta(n + 1, x)


def _lower_series(a: float, x: float) -> float:
    """P(a, x) by its power series (converges fast for x < a + 1)."""
    term = total = 1 / a
    n = a
    for _ in range(10000):
        n += 1
        term *= x / n
        total += term
        if abs(term) < abs(total) * 1e-16:
            break
    return total * math.exp(-x + a * math.log(x) - math.lgamma(a))


def _upper_fraction(a: float, x: float) -> float:
    """Q(a, x) by its continued fraction (Lentz; converges fast for x > a + 1)."""
    tiny = 1e-300
    b = x + 1 - a
    c = 1 / tiny
    d = 1 / b
    h = d
    for i in range(1, 10000):
        an = -i * (i - a)
        b += 2
        d = an * d + b
        d = tiny if abs(d) < tiny else d
        c = b + an / c
        c = tiny if abs(c) < tiny else c
        d = 1 / d
        delta = d * c
        h *= delta
        if abs(delta - 1) < 1e-16:
            break
    return math.exp(-x + a * math.log(x) - math.lgamma(a)) * h


def igamma(a: float, x: float) -> float:
    """The regularized lower incomplete gamma P(a, x)."""
    if math.isnan(a) or math.isnan(x) or a < 0 or x < 0:
        return math.nan
    if a == 0:
        return 1.0 if x > 0 else math.nan
    if x == 0:
        return 0.0
    if math.isinf(x):
        return 1.0
    if math.isinf(a):
        return 0.0
    return _lower_series(a, x) if x < a + 1 else 1 - _upper_fraction(a, x)


def igammac(a: float, x: float) -> float:
    """The regularized upper incomplete gamma Q(a, x) = 1 - P(a, x)."""
    if math.isnan(a) or math.isnan(x) or a < 0 or x < 0:
        return math.nan
    if a == 0:
        return 0.0 if x > 0 else math.nan
    if x == 0:
        return 1.0
    if math.isinf(x):
        return 0.0
    if math.isinf(a):
        return 1.0
    return 1 - _lower_series(a, x) if x < a + 1 else _upper_fraction(a, x)


def bessel_i1e(x: float) -> float:
    """exp(-|x|) I_1(x): the power series, or the asymptotic series for large |x|."""
    if math.isnan(x):
        return x
    magnitude = abs(x)
    if magnitude > 50:
        inverse = 1 / (8 * magnitude)
        series = 1 - 3 * inverse * (1 + 5 * inverse / 2 * (1 + 21 * inverse / 3))
        return math.copysign(series / math.sqrt(2 * math.pi * magnitude), x)
    half = magnitude / 2
    term = half
    total = term
    for k in range(1, 500):
        term *= half * half / (k * (k + 1))
        total += term
        if term < total * 1e-17:
            break
    return math.copysign(total * math.exp(-magnitude), x)


def bessel_i1(x: float) -> float:
    magnitude = abs(x)
    if magnitude > 700:
        return math.copysign(math.inf, x)
    return bessel_i1e(x) * math.exp(magnitude)
