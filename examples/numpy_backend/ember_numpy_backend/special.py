"""Kernels of the special-function prims: NumPy's i0, short formulas (sin(x)/x, erfcx,
ndtri), the orthogonal polynomials by their three-term recurrences, and series and
asymptotic expansions written with Python's `math` (I_1, Hurwitz zeta, polygamma, incomplete
gamma in scalar_math.py; Bessel J, Y, K and Airy Ai in bessel.py). `MISSING` would name a
prim without a kernel (a Graph needing one is refused when it is compiled); it is empty.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from ember_numpy_backend import bessel
from ember_numpy_backend.kernels import kernel
from ember_numpy_backend.scalar_math import (
    bessel_i1,
    bessel_i1e,
    erfinv,
    igamma,
    igammac,
    polygamma,
    vectorized,
    zeta,
)

Array = Any  # numpy.ndarray

MISSING: tuple[str, ...] = ()  # every special prim has a kernel


@kernel("bessel_i0")
def _i0(a: Array) -> Array:
    return np.i0(a.astype(np.float64))


@kernel("bessel_i0e")
def _i0e(a: Array) -> Array:
    x = a.astype(np.float64)
    return np.exp(-np.abs(x)) * np.i0(x)


@kernel("spherical_bessel_j0")
def _spherical_j0(a: Array) -> Array:
    x = a.astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(x == 0, 1.0, np.sin(x) / x)


def _erfcx(x: float) -> float:
    if x < 25:
        return math.exp(x * x) * math.erfc(x)
    inverse = 1 / (x * x)  # the asymptotic series, where exp(x*x) would overflow
    return (1 - 0.5 * inverse + 0.75 * inverse * inverse) / (x * math.sqrt(math.pi))


kernel("erfcx")(vectorized(_erfcx))
kernel("ndtri")(vectorized(lambda p: math.sqrt(2) * erfinv(2 * p - 1)))


def _recurrence(
    first: Callable[[Array], Array], step: Callable[[Array, Array, Array, Array], Array]
) -> Callable[[Array, Array], Array]:
    """P_n(x) for integral n >= 0 (0 for n < 0) from P_0, P_1 and P_{k+1} = step(k, x, P_k, P_{k-1})."""

    def polynomial(a: Array, n: Array) -> Array:
        x = a.astype(np.float64)
        order = np.broadcast_to(n, x.shape).astype(np.int64)
        previous, current = np.ones_like(x), first(x)
        result = np.where(order == 0, previous, 0.0)
        result = np.where(order == 1, current, result)
        for k in range(1, int(order.max(initial=0))):
            previous, current = current, step(np.float64(k), x, current, previous)
            result = np.where(order == k + 1, current, result)
        return result

    return polynomial


_POLYNOMIALS = {
    "chebyshev_t": (lambda x: x, lambda k, x, p, q: 2 * x * p - q),
    "chebyshev_u": (lambda x: 2 * x, lambda k, x, p, q: 2 * x * p - q),
    "chebyshev_v": (lambda x: 2 * x - 1, lambda k, x, p, q: 2 * x * p - q),
    "chebyshev_w": (lambda x: 2 * x + 1, lambda k, x, p, q: 2 * x * p - q),
    "hermite_h": (lambda x: 2 * x, lambda k, x, p, q: 2 * x * p - 2 * k * q),
    "hermite_he": (lambda x: x, lambda k, x, p, q: x * p - k * q),
    "laguerre_l": (
        lambda x: 1 - x,
        lambda k, x, p, q: ((2 * k + 1 - x) * p - k * q) / (k + 1),
    ),
    "legendre_p": (lambda x: x, lambda k, x, p, q: ((2 * k + 1) * x * p - k * q) / (k + 1)),
}
for _name, (_first, _step) in _POLYNOMIALS.items():
    kernel(_name)(_recurrence(_first, _step))


def _binary(fn: Callable[[float, float], float]) -> Callable[[Array, Array], Array]:
    ufunc = np.vectorize(fn, otypes=[np.float64])
    return lambda a, b: ufunc(a.astype(np.float64), b.astype(np.float64))


kernel("bessel_i1")(vectorized(bessel_i1))
kernel("bessel_i1e")(vectorized(bessel_i1e))
kernel("zeta")(_binary(zeta))
kernel("igamma")(_binary(igamma))
kernel("igammac")(_binary(igammac))


@kernel("polygamma")
def _polygamma(a: Array, n: int) -> Array:
    return vectorized(lambda x: polygamma(n, x))(a)


for _name in (
    "bessel_j0",
    "bessel_j1",
    "bessel_y0",
    "bessel_y1",
    "bessel_k0",
    "bessel_k1",
    "bessel_k0e",
    "bessel_k1e",
    "airy_ai",
):
    kernel(_name)(vectorized(getattr(bessel, _name)))
