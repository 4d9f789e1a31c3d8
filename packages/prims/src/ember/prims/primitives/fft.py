"""Discrete Fourier transform prims over a list of dims, unnormalized in both directions
(decompositions apply ATen's 1/n or 1/sqrt(n) scaling): complex to complex, real to complex
(half spectrum along the last dim) and complex to real (its inverse).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ember.prims.primitives.complex_numbers import COMPLEX_OF, REAL_OF
from ember.prims.primitives.prim import define

FAMILY = "fft"


def _c2c_meta(a: torch.Tensor, dims: Sequence[int], forward: bool) -> torch.Tensor:
    if not a.dtype.is_complex:
        raise TypeError(f"fft_c2c takes a complex operand, got {a.dtype}")
    return torch.empty(a.shape, dtype=a.dtype, device="meta")


define(
    "fft_c2c",
    "(Tensor a, int[] dims, bool forward) -> Tensor",
    _c2c_meta,
    lambda a, dims, forward: torch.ops.aten._fft_c2c(a, list(dims), 0, forward).contiguous(),
    family=FAMILY,
    doc="sum over the dims of a[n] * exp(-+2 pi i k n / N) (minus sign when forward); "
    "no normalization",
)


def _r2c_meta(a: torch.Tensor, dims: Sequence[int]) -> torch.Tensor:
    if a.dtype not in COMPLEX_OF:
        raise TypeError(f"fft_r2c takes a float32 or float64 operand, got {a.dtype}")
    shape = list(a.shape)
    shape[dims[-1]] = shape[dims[-1]] // 2 + 1
    return torch.empty(shape, dtype=COMPLEX_OF[a.dtype], device="meta")


define(
    "fft_r2c",
    "(Tensor a, int[] dims) -> Tensor",
    _r2c_meta,
    lambda a, dims: torch.ops.aten._fft_r2c(a, list(dims), 0, True).contiguous(),
    family=FAMILY,
    doc="forward transform of a real tensor over the dims, keeping the non-redundant half "
    "(N // 2 + 1 entries) of the last dim; no normalization",
)


def _c2r_meta(a: torch.Tensor, dims: Sequence[int], last_dim_size: int) -> torch.Tensor:
    if not a.dtype.is_complex:
        raise TypeError(f"fft_c2r takes a complex operand, got {a.dtype}")
    shape = list(a.shape)
    shape[dims[-1]] = last_dim_size
    return torch.empty(shape, dtype=REAL_OF[a.dtype], device="meta")


define(
    "fft_c2r",
    "(Tensor a, int[] dims, SymInt last_dim_size) -> Tensor",
    _c2r_meta,
    lambda a, dims, n: torch.ops.aten._fft_c2r(a, list(dims), 0, n).contiguous(),
    family=FAMILY,
    doc="inverse of fft_r2c: a Hermitian half spectrum over the dims to a real tensor whose "
    "last dim has last_dim_size entries; no normalization",
)
