"""Special-function prims: Bessel, Airy, gamma-family and orthogonal-polynomial functions.

Elementwise on floating operands of one shape and dtype, as the elementwise prims are. They
are prims because they have no short exact formula in the other prims; a backend implements
each once (series or rational approximations, as Cephes does).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ember.prims.primitives.elementwise import FLOAT, define_binary, define_unary
from ember.prims.primitives.prim import define

FAMILY = "special"

# name: (reference, semantics)
UNARY: dict[str, tuple[Callable[[torch.Tensor], torch.Tensor], str]] = {
    "bessel_i0": (torch.special.i0, "modified Bessel function of the first kind, order 0"),
    "bessel_i0e": (torch.special.i0e, "exp(-|a|) * bessel_i0(a)"),
    "bessel_i1": (torch.special.i1, "modified Bessel function of the first kind, order 1"),
    "bessel_i1e": (torch.special.i1e, "exp(-|a|) * bessel_i1(a)"),
    "bessel_j0": (torch.special.bessel_j0, "Bessel function of the first kind, order 0"),
    "bessel_j1": (torch.special.bessel_j1, "Bessel function of the first kind, order 1"),
    "bessel_y0": (torch.special.bessel_y0, "Bessel function of the second kind, order 0"),
    "bessel_y1": (torch.special.bessel_y1, "Bessel function of the second kind, order 1"),
    "bessel_k0": (
        torch.special.modified_bessel_k0,
        "modified Bessel function of the second kind, order 0",
    ),
    "bessel_k1": (
        torch.special.modified_bessel_k1,
        "modified Bessel function of the second kind, order 1",
    ),
    "bessel_k0e": (torch.special.scaled_modified_bessel_k0, "exp(a) * bessel_k0(a)"),
    "bessel_k1e": (torch.special.scaled_modified_bessel_k1, "exp(a) * bessel_k1(a)"),
    "spherical_bessel_j0": (torch.special.spherical_bessel_j0, "sin(a) / a (1 at 0)"),
    "airy_ai": (torch.special.airy_ai, "Airy function Ai(a)"),
    "erfcx": (torch.special.erfcx, "exp(a*a) * erfc(a) without overflow"),
    "ndtri": (torch.special.ndtri, "inverse of the standard normal CDF on (0, 1)"),
}

BINARY: dict[str, tuple[Callable[[torch.Tensor, torch.Tensor], torch.Tensor], str]] = {
    "zeta": (torch.special.zeta, "Hurwitz zeta: sum over k >= 0 of (k + b) ** -a"),
    "igamma": (torch.special.gammainc, "regularized lower incomplete gamma P(a, b)"),
    "igammac": (torch.special.gammaincc, "regularized upper incomplete gamma Q(a, b)"),
    "chebyshev_t": (
        torch.special.chebyshev_polynomial_t,
        "Chebyshev polynomial of the first kind T_n(a) for n = b (integral values; 0 for n < 0)",
    ),
    "chebyshev_u": (
        torch.special.chebyshev_polynomial_u,
        "Chebyshev polynomial of the second kind U_n(a), n = b",
    ),
    "chebyshev_v": (
        torch.special.chebyshev_polynomial_v,
        "Chebyshev polynomial of the third kind V_n(a), n = b",
    ),
    "chebyshev_w": (
        torch.special.chebyshev_polynomial_w,
        "Chebyshev polynomial of the fourth kind W_n(a), n = b",
    ),
    "hermite_h": (
        torch.special.hermite_polynomial_h,
        "physicists' Hermite polynomial H_n(a), n = b",
    ),
    "hermite_he": (
        torch.special.hermite_polynomial_he,
        "probabilists' Hermite polynomial He_n(a), n = b",
    ),
    "laguerre_l": (torch.special.laguerre_polynomial_l, "Laguerre polynomial L_n(a), n = b"),
    "legendre_p": (torch.special.legendre_polynomial_p, "Legendre polynomial P_n(a), n = b"),
}

for _name, (_fn, _doc) in UNARY.items():
    define_unary(_name, _fn, FLOAT, False, _doc, family=FAMILY)
for _name, (_binary_fn, _doc) in BINARY.items():
    define_binary(_name, _binary_fn, FLOAT, False, _doc, family=FAMILY)


def _polygamma_meta(a: torch.Tensor, n: int) -> torch.Tensor:
    if not a.dtype.is_floating_point:
        raise TypeError(f"prims::polygamma takes a floating point operand, got {a.dtype}")
    if n < 0:
        raise ValueError(f"prims::polygamma takes n >= 0, got {n}")
    return torch.empty(a.shape, dtype=a.dtype, device="meta")


define(
    "polygamma",
    "(Tensor a, int n) -> Tensor",
    _polygamma_meta,
    lambda a, n: torch.special.polygamma(n, a).contiguous(),
    family=FAMILY,
    doc="n-th derivative of digamma at a: (-1)**(n+1) * n! * zeta(n + 1, a) for n >= 1",
)
