"""Scalar Bessel and Airy functions in Python's `math`: power series near 0 and Hankel
asymptotic expansions far from it (float64; accurate to about 1e-9 relative, more than a
float32 result needs). Used by special.py.
"""

from __future__ import annotations

import math

EULER = 0.5772156649015329


def _harmonic(n: int) -> float:
    return sum(1.0 / j for j in range(1, n + 1))


def _hankel_terms(order: int, x: float) -> list[float]:
    """a_k = prod_{j<=k} (4 order^2 - (2j - 1)^2) / (k! (8x)^k), until they stop shrinking."""
    mu = 4.0 * order * order
    terms = [1.0]
    for k in range(1, 60):
        term = terms[-1] * (mu - (2 * k - 1) ** 2) / (k * 8 * x)
        if abs(term) >= abs(terms[-1]) or abs(term) < 1e-18:
            break
        terms.append(term)
    return terms


def _hankel_jy(order: int, x: float) -> tuple[float, float]:
    """(J_order(x), Y_order(x)) for large x > 0."""
    terms = _hankel_terms(order, x)
    p = sum(t * (-1) ** (k // 2) for k, t in enumerate(terms) if k % 2 == 0)
    q = sum(t * (-1) ** (k // 2) for k, t in enumerate(terms) if k % 2 == 1)
    chi = x - (order / 2 + 0.25) * math.pi
    scale = math.sqrt(2 / (math.pi * x))
    return scale * (p * math.cos(chi) - q * math.sin(chi)), scale * (
        p * math.sin(chi) + q * math.cos(chi)
    )


def _series_j(order: int, x: float) -> float:
    half = x / 2
    term = half**order / math.factorial(order)
    total = term
    for k in range(1, 200):
        term *= -half * half / (k * (k + order))
        total += term
        if abs(term) < 1e-17 * abs(total):
            break
    return total


_FAR = 12.0


def bessel_j0(x: float) -> float:
    x = abs(x)
    if math.isinf(x):
        return 0.0
    return _series_j(0, x) if x <= _FAR else _hankel_jy(0, x)[0]


def bessel_j1(x: float) -> float:
    if math.isinf(x):
        return 0.0
    value = _series_j(1, abs(x)) if abs(x) <= _FAR else _hankel_jy(1, abs(x))[0]
    return -value if x < 0 else value  # J1 is odd


def bessel_y0(x: float) -> float:
    if math.isnan(x) or x < 0:
        return math.nan
    if x == 0:
        return -math.inf
    if math.isinf(x):
        return 0.0
    if x > _FAR:
        return _hankel_jy(0, x)[1]
    quarter = x * x / 4
    term, total = 1.0, 0.0
    for k in range(1, 200):
        term *= -quarter / (k * k)
        piece = -term * _harmonic(k)
        total += piece
        if abs(piece) < 1e-17 * max(abs(total), 1e-300):
            break
    return 2 / math.pi * ((math.log(x / 2) + EULER) * _series_j(0, x) + total)


def bessel_y1(x: float) -> float:
    if math.isnan(x) or x < 0:
        return math.nan
    if x == 0:
        return -math.inf
    if math.isinf(x):
        return 0.0
    if x > _FAR:
        return _hankel_jy(1, x)[1]
    half = x / 2
    term = half  # (-1)^k (x/2)^(2k+1) / (k! (k+1)!)
    total = 0.0
    for k in range(200):
        if k:
            term *= -half * half / (k * (k + 1))
        psi = -2 * EULER + _harmonic(k) + _harmonic(k + 1)
        piece = term * psi
        total += piece
        if k and abs(piece) < 1e-17 * max(abs(total), 1e-300):
            break
    return -2 / (math.pi * x) + 2 / math.pi * math.log(half) * _series_j(1, x) - total / math.pi


def _series_i(order: int, x: float) -> float:
    half = x / 2
    term = half**order / math.factorial(order)
    total = term
    for k in range(1, 500):
        term *= half * half / (k * (k + order))
        total += term
        if term < 1e-17 * total:
            break
    return total


def _scaled_k_asymptotic(order: int, x: float) -> float:
    """exp(x) K_order(x) for large x."""
    mu = 4.0 * order * order
    term, total = 1.0, 1.0
    for k in range(1, 60):
        new = term * (mu - (2 * k - 1) ** 2) / (k * 8 * x)
        if abs(new) >= abs(term) or abs(new) < 1e-18:
            break
        term = new
        total += term
    return math.sqrt(math.pi / (2 * x)) * total


_K_FAR = 8.0


def _k0_series(x: float) -> float:
    quarter = x * x / 4
    term, total = 1.0, 0.0
    for k in range(1, 200):
        term *= quarter / (k * k)
        total += term * _harmonic(k)
        if term < 1e-17:
            break
    return -(math.log(x / 2) + EULER) * _series_i(0, x) + total


def _k1_series(x: float) -> float:
    half = x / 2
    term = 1.0  # (x^2/4)^k / (k! (k+1)!)
    total = 0.0
    for k in range(200):
        if k:
            term *= half * half / (k * (k + 1))
        total += term * (-2 * EULER + _harmonic(k) + _harmonic(k + 1))
        if k and term < 1e-17:
            break
    return 1 / x + math.log(half) * _series_i(1, x) - half / 2 * total


def _k(order: int, x: float, scaled: bool) -> float:
    if math.isnan(x) or x < 0:
        return math.nan
    if x == 0:
        return math.inf
    if math.isinf(x):
        return 0.0
    if x > _K_FAR:
        value = _scaled_k_asymptotic(order, x)
        return value if scaled else value * math.exp(-x)
    value = _k0_series(x) if order == 0 else _k1_series(x)
    return value * math.exp(x) if scaled else value


def bessel_k0(x: float) -> float:
    return _k(0, x, False)


def bessel_k1(x: float) -> float:
    return _k(1, x, False)


def bessel_k0e(x: float) -> float:
    return _k(0, x, True)


def bessel_k1e(x: float) -> float:
    return _k(1, x, True)


_AIRY_C1 = 0.355028053887817239
_AIRY_C2 = 0.258819403792806798


def airy_ai(x: float) -> float:
    if math.isnan(x):
        return x
    if x == math.inf:
        return 0.0
    if x == -math.inf:
        return 0.0
    if abs(x) > 5:  # the asymptotic expansions in zeta = 2/3 |x|^(3/2)
        z = abs(x)
        zeta = 2 / 3 * z**1.5
        u = [1.0]
        for k in range(1, 30):
            u.append(u[-1] * (6 * k - 5) * (6 * k - 3) * (6 * k - 1) / ((2 * k - 1) * 216 * k))
        if x > 0:  # exp(-zeta) / (2 sqrt(pi) x^(1/4)) * sum (-1)^k u_k / zeta^k
            total = sum((-1) ** k * u[k] / zeta**k for k in range(30) if u[k] / zeta**k > 1e-18)
            return math.exp(-zeta) / (2 * math.sqrt(math.pi) * z**0.25) * total
        p = sum((-1) ** k * u[2 * k] / zeta ** (2 * k) for k in range(15))
        q = sum((-1) ** k * u[2 * k + 1] / zeta ** (2 * k + 1) for k in range(14))
        angle = zeta + math.pi / 4
        return (math.sin(angle) * p - math.cos(angle) * q) / (math.sqrt(math.pi) * z**0.25)
    # the power series: Ai = c1 f - c2 g
    cube = x**3
    f_term, g_term = 1.0, x
    f, g = f_term, g_term
    for k in range(1, 300):
        f_term *= cube / ((3 * k - 1) * (3 * k))
        g_term *= cube / ((3 * k) * (3 * k + 1))
        f += f_term
        g += g_term
        if abs(f_term) < 1e-17 * abs(f) and abs(g_term) < 1e-17 * max(abs(g), 1e-300):
            break
    return _AIRY_C1 * f - _AIRY_C2 * g
