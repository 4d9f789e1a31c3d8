"""ATen complex-number and FFT ops written with the complex and fft prims: the `_fft_*`
kernels every `torch.fft` function reaches, with ATen's normalization (0 none, 1 by
1/sqrt(n), 2 by 1/n) applied as a multiplication; complex, polar, view_as_complex, real,
imag, conj and angle.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from ember.prims.decompositions.operands import broadcast, scalar_like
from ember.prims.decompositions.table import to_prims
from ember.prims.primitives import prims


def _normalized(x: torch.Tensor, normalization: int, n: int) -> torch.Tensor:
    if normalization == 0 or n == 0:
        return x
    scale = 1 / math.sqrt(n) if normalization == 1 else 1 / n
    return prims.mul(x, scalar_like(scale, x))


def _count(shape: Sequence[int], dims: Sequence[int]) -> int:
    return math.prod(shape[d] for d in dims)


@to_prims("aten::_fft_c2c.default")
def _fft_c2c(
    a: torch.Tensor, dim: Sequence[int], normalization: int, forward: bool
) -> torch.Tensor:
    if not dim:
        return prims.clone(a)
    return _normalized(prims.fft_c2c(a, list(dim), forward), normalization, _count(a.shape, dim))


@to_prims("aten::_fft_r2c.default")
def _fft_r2c(
    a: torch.Tensor, dim: Sequence[int], normalization: int, onesided: bool
) -> torch.Tensor:
    if onesided:
        result = prims.fft_r2c(a, list(dim))
    else:  # the full spectrum: transform a with a zero imaginary part
        zeros = prims.full(list(a.shape), 0.0, dtype=a.dtype, device=a.device)
        result = prims.fft_c2c(prims.complex(a, zeros), list(dim), True)
    return _normalized(result, normalization, _count(a.shape, dim))


@to_prims("aten::_fft_c2r.default")
def _fft_c2r(
    a: torch.Tensor, dim: Sequence[int], normalization: int, last_dim_size: int
) -> torch.Tensor:
    result = prims.fft_c2r(a, list(dim), last_dim_size)
    return _normalized(result, normalization, _count(result.shape, dim))


@to_prims("aten::complex.default")
def _complex(real: torch.Tensor, imag: torch.Tensor) -> torch.Tensor:
    re, im = broadcast(real, imag)
    return prims.complex(re, im)


@to_prims("aten::polar.default")
def _polar(magnitude: torch.Tensor, angle: torch.Tensor) -> torch.Tensor:
    r, theta = broadcast(magnitude, angle)
    return prims.complex(prims.mul(r, prims.cos(theta)), prims.mul(r, prims.sin(theta)))


@to_prims("aten::view_as_complex.default")
def _view_as_complex(a: torch.Tensor) -> torch.Tensor:
    last = a.dim() - 1
    shape = list(a.shape[:-1])
    re = prims.reshape(prims.slice(a, [0] * a.dim(), [*shape, 1]), shape)
    start = [0] * last + [1]
    im = prims.reshape(prims.slice(a, start, [*shape, 2]), shape)
    return prims.complex(re, im)


@to_prims("aten::real.default")
def _real(a: torch.Tensor) -> torch.Tensor:
    return prims.real(a) if a.dtype.is_complex else a


@to_prims("aten::imag.default")
def _imag(a: torch.Tensor) -> torch.Tensor:
    return prims.imag(a)


@to_prims("aten::_conj_physical.default", "aten::conj_physical.default")
def _conj_physical(a: torch.Tensor) -> torch.Tensor:
    return prims.conj(a) if a.dtype.is_complex else prims.clone(a)


@to_prims("aten::conj.default", "aten::_conj.default")
def _conj(a: torch.Tensor) -> torch.Tensor:
    # the conjugate is materialized at once (prims have no lazy conjugate bit), so
    # resolve_conj is the identity
    return prims.conj(a) if a.dtype.is_complex else a


@to_prims("aten::angle.default")
def _angle(a: torch.Tensor) -> torch.Tensor:
    if a.dtype.is_complex:
        return prims.atan2(prims.imag(a), prims.real(a))
    x = a if a.dtype.is_floating_point else prims.convert_element_type(a, torch.get_default_dtype())
    # pi for negative numbers, 0 otherwise, NaN kept
    half_turn = prims.where(
        prims.lt(x, scalar_like(0, x)), scalar_like(math.pi, x), scalar_like(0, x)
    )
    return prims.where(prims.isnan(x), x, half_turn)


@to_prims("aten::view_as_real.default")
def _view_as_real(a: torch.Tensor) -> torch.Tensor:
    shape = [*a.shape, 1]
    parts = [prims.reshape(prims.real(a), shape), prims.reshape(prims.imag(a), shape)]
    return prims.cat(parts, a.dim())
