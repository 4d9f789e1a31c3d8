"""Complex-number prims: build a complex tensor from real and imaginary parts, take the parts
apart, and conjugate. Results are new contiguous tensors.
"""

from __future__ import annotations

import torch

from ember.prims.primitives.prim import define

FAMILY = "complex"

REAL_OF = {
    torch.complex32: torch.float16,
    torch.complex64: torch.float32,
    torch.complex128: torch.float64,
}
COMPLEX_OF = {value: key for key, value in REAL_OF.items()}


def _part_meta(a: torch.Tensor) -> torch.Tensor:
    if not a.dtype.is_complex:
        raise TypeError(f"takes a complex operand, got {a.dtype}")
    return torch.empty(a.shape, dtype=REAL_OF[a.dtype], device="meta")


define(
    "real",
    "(Tensor a) -> Tensor",
    _part_meta,
    lambda a: torch.real(a).clone(memory_format=torch.contiguous_format),
    family=FAMILY,
    doc="real part of a complex tensor, in the matching float dtype",
)
define(
    "imag",
    "(Tensor a) -> Tensor",
    _part_meta,
    lambda a: torch.imag(a).clone(memory_format=torch.contiguous_format),
    family=FAMILY,
    doc="imaginary part of a complex tensor, in the matching float dtype",
)


def _complex_meta(re: torch.Tensor, im: torch.Tensor) -> torch.Tensor:
    if re.shape != im.shape or re.dtype != im.dtype or re.dtype not in COMPLEX_OF:
        raise TypeError("complex takes float32 or float64 parts of one shape and dtype")
    return torch.empty(re.shape, dtype=COMPLEX_OF[re.dtype], device="meta")


define(
    "complex",
    "(Tensor re, Tensor im) -> Tensor",
    _complex_meta,
    lambda re, im: torch.complex(re, im).contiguous(),
    family=FAMILY,
    doc="re + i * im: float32 parts make complex64, float64 parts complex128",
)


def _conj_meta(a: torch.Tensor) -> torch.Tensor:
    return torch.empty(a.shape, dtype=a.dtype, device="meta")


define(
    "conj",
    "(Tensor a) -> Tensor",
    _conj_meta,
    lambda a: torch.conj_physical(a).contiguous(),
    family=FAMILY,
    doc="complex conjugate, materialized (a copy of a for real dtypes)",
)
