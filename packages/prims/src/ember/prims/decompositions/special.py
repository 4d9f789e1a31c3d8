"""ATen special functions written with the special-function prims (Bessel, zeta, incomplete
gamma, orthogonal polynomials) and short formulas of elementwise prims (polygamma, mvlgamma,
xlog1py, shifted Chebyshev polynomials).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from ember.prims.decompositions.elementwise import INT_TO_FLOAT, unary
from ember.prims.decompositions.operands import (
    Operand,
    broadcast,
    result_type,
    scalar_like,
    to_float,
)
from ember.prims.decompositions.table import to_prims
from ember.prims.primitives import Prim, prims

# ATen op (after `aten::`): the unary prim that computes it
_UNARY = {
    "i0": prims.bessel_i0,
    "special_i0e": prims.bessel_i0e,
    "special_i1": prims.bessel_i1,
    "special_i1e": prims.bessel_i1e,
    "special_bessel_j0": prims.bessel_j0,
    "special_bessel_j1": prims.bessel_j1,
    "special_bessel_y0": prims.bessel_y0,
    "special_bessel_y1": prims.bessel_y1,
    "special_modified_bessel_i0": prims.bessel_i0,
    "special_modified_bessel_i1": prims.bessel_i1,
    "special_modified_bessel_k0": prims.bessel_k0,
    "special_modified_bessel_k1": prims.bessel_k1,
    "special_scaled_modified_bessel_k0": prims.bessel_k0e,
    "special_scaled_modified_bessel_k1": prims.bessel_k1e,
    "special_spherical_bessel_j0": prims.spherical_bessel_j0,
    "special_airy_ai": prims.airy_ai,
    "special_erfcx": prims.erfcx,
    "special_ndtri": prims.ndtri,
}


def _unary_special(prim: Prim) -> Callable[[torch.Tensor], torch.Tensor]:
    return lambda a: unary(prim, a, INT_TO_FLOAT)


for _name, _prim in _UNARY.items():
    to_prims(f"aten::{_name}.default")(_unary_special(_prim))
to_prims("aten::i0_.default")(lambda a: prims.copy_to(a, unary(prims.bessel_i0, a, INT_TO_FLOAT)))


def _binary_special(prim: Prim, shift: bool = False) -> Callable[[Operand, Operand], torch.Tensor]:
    def decomposition(a: Operand, b: Operand) -> torch.Tensor:
        x, n = broadcast(a, b, dtype=to_float(result_type(a, b)))
        if shift:  # the shifted polynomials: P*_n(x) = P_n(2x - 1)
            x = prims.sub(prims.mul(x, scalar_like(2, x)), scalar_like(1, x))
        return prim(x, n)

    return decomposition


# ATen binary op (after `aten::special_`, or `aten::`): (prim, shifted argument)
_BINARY: dict[str, tuple[Prim, bool]] = {
    "special_zeta": (prims.zeta, False),
    "igamma": (prims.igamma, False),
    "igammac": (prims.igammac, False),
    "special_chebyshev_polynomial_t": (prims.chebyshev_t, False),
    "special_chebyshev_polynomial_u": (prims.chebyshev_u, False),
    "special_chebyshev_polynomial_v": (prims.chebyshev_v, False),
    "special_chebyshev_polynomial_w": (prims.chebyshev_w, False),
    "special_shifted_chebyshev_polynomial_t": (prims.chebyshev_t, True),
    "special_shifted_chebyshev_polynomial_u": (prims.chebyshev_u, True),
    "special_shifted_chebyshev_polynomial_v": (prims.chebyshev_v, True),
    "special_shifted_chebyshev_polynomial_w": (prims.chebyshev_w, True),
    "special_hermite_polynomial_h": (prims.hermite_h, False),
    "special_hermite_polynomial_he": (prims.hermite_he, False),
    "special_laguerre_polynomial_l": (prims.laguerre_l, False),
    "special_legendre_polynomial_p": (prims.legendre_p, False),
}
for _name, (_prim, _shift) in _BINARY.items():
    _overloads: tuple[str, ...] = ("default", "x_scalar", "n_scalar")
    if _name.startswith("igamma"):
        _overloads = ("default",)
    elif _name == "special_zeta":
        _overloads = ("default", "other_scalar", "self_scalar")
    for _overload in _overloads:
        to_prims(f"aten::{_name}.{_overload}")(_binary_special(_prim, _shift))


@to_prims("aten::polygamma.default")
def _polygamma(n: int, a: torch.Tensor) -> torch.Tensor:
    x = unary(prims.clone, a, INT_TO_FLOAT) if not a.dtype.is_floating_point else a
    return prims.digamma(x) if n == 0 else prims.polygamma(x, n)


@to_prims("aten::mvlgamma.default")
def _mvlgamma(a: torch.Tensor, p: int) -> torch.Tensor:
    x = unary(prims.clone, a, INT_TO_FLOAT) if not a.dtype.is_floating_point else a
    total = scalar_like(p * (p - 1) / 4 * math.log(math.pi), x)
    for i in range(p):
        total = prims.add(total, prims.lgamma(prims.sub(x, scalar_like(i / 2, x))))
    return total


@to_prims(
    "aten::special_xlog1py.default",
    "aten::special_xlog1py.self_scalar",
    "aten::special_xlog1py.other_scalar",
)
def _xlog1py(a: Operand, b: Operand) -> torch.Tensor:
    x, y = broadcast(a, b, dtype=to_float(result_type(a, b)))
    product = prims.mul(x, prims.log1p(y))
    zero = scalar_like(0, x)
    return prims.where(prims.isnan(y), y, prims.where(prims.eq(x, zero), zero, product))
