"""Reduction prims: sum, prod, amax, amin, var over a list of dims; argmax/argmin, cumulative
sum/product and sort along one dim.

Reductions drop the reduced dims (decompositions add keepdim) and keep the operand's dtype
(decompositions choose the accumulation dtype by converting first).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from ember.prims.primitives.prim import define

FAMILY = "reductions"


def _reduced_shape(a: torch.Tensor, dims: Sequence[int]) -> list[int]:
    for dim in dims:
        if not 0 <= dim < max(a.dim(), 1):
            raise ValueError(f"reduction dim {dim} out of range for {a.dim()} dims")
    return [size for i, size in enumerate(a.shape) if i not in dims]


def _reduction(name: str, fn: Callable[[torch.Tensor, list[int]], torch.Tensor], doc: str) -> None:
    def meta(a: torch.Tensor, dims: Sequence[int]) -> torch.Tensor:
        return torch.empty(_reduced_shape(a, dims), dtype=a.dtype, device="meta")

    def impl(a: torch.Tensor, dims: Sequence[int]) -> torch.Tensor:
        if not dims:
            return a.clone(memory_format=torch.contiguous_format)
        if a.dim() == 0:
            return fn(a.reshape(1), [0]).reshape(()).to(a.dtype)
        return fn(a, list(dims)).to(a.dtype).contiguous()

    define(name, "(Tensor a, int[] dims) -> Tensor", meta, impl, family=FAMILY, doc=doc)


def _prod(a: torch.Tensor, dims: list[int]) -> torch.Tensor:
    for dim in sorted(dims, reverse=True):
        a = torch.prod(a, dim, dtype=a.dtype)
    return a


_reduction(
    "sum",
    lambda a, dims: torch.sum(a, dims, dtype=a.dtype),
    "sum over dims, accumulated and returned in a's dtype (bool: logical or)",
)
_reduction("prod", _prod, "product over dims in a's dtype (bool: logical and)")
_reduction(
    "amax",
    lambda a, dims: torch.amax(a, dims),
    "largest element over dims; NaN if any is NaN; dims must be non-empty in size",
)
_reduction(
    "amin",
    lambda a, dims: torch.amin(a, dims),
    "smallest element over dims; NaN if any is NaN; dims must be non-empty in size",
)


def _var_meta(a: torch.Tensor, dims: Sequence[int], correction: float) -> torch.Tensor:
    if not a.dtype.is_floating_point:
        raise TypeError(f"prims::var takes floating point, got {a.dtype}")
    return torch.empty(_reduced_shape(a, dims), dtype=a.dtype, device="meta")


def _var(a: torch.Tensor, dims: Sequence[int], correction: float) -> torch.Tensor:
    if not dims:  # one element per group: var is 0 / (1 - correction)
        return ((a - a) / (1 - correction)).contiguous()
    return torch.var(a, list(dims), correction=correction).contiguous()


define(
    "var",
    "(Tensor a, int[] dims, float correction) -> Tensor",
    _var_meta,
    _var,
    family=FAMILY,
    doc="sum((a - mean)^2) / (N - correction) over dims, N the number of reduced elements",
)


def _arg_operand(a: torch.Tensor) -> torch.Tensor:
    """What torch.argmax/argmin take: at least one dimension, and no bool (cumprod's backward
    finds the first zero with argmax of a mask)."""
    a = a.reshape(1) if a.dim() == 0 else a
    return a.to(torch.uint8) if a.dtype == torch.bool else a


def _arg_meta(a: torch.Tensor, dim: int) -> torch.Tensor:
    return torch.empty(_reduced_shape(a, [dim]), dtype=torch.int64, device="meta")


define(
    "argmax",
    "(Tensor a, int dim) -> Tensor",
    _arg_meta,
    lambda a, dim: torch.argmax(_arg_operand(a), dim).contiguous(),
    family=FAMILY,
    doc="int64 index of the first largest element along dim (NaN is largest)",
)
define(
    "argmin",
    "(Tensor a, int dim) -> Tensor",
    _arg_meta,
    lambda a, dim: torch.argmin(_arg_operand(a), dim).contiguous(),
    family=FAMILY,
    doc="int64 index of the first smallest element along dim (NaN is smallest)",
)


def _scan_meta(a: torch.Tensor, dim: int) -> torch.Tensor:
    return torch.empty(a.shape, dtype=a.dtype, device="meta")


define(
    "cumsum",
    "(Tensor a, int dim) -> Tensor",
    _scan_meta,
    lambda a, dim: torch.cumsum(a, dim, dtype=a.dtype).contiguous(),
    family=FAMILY,
    doc="inclusive running sum along dim, in a's dtype",
)
define(
    "cumprod",
    "(Tensor a, int dim) -> Tensor",
    _scan_meta,
    lambda a, dim: torch.cumprod(a, dim, dtype=a.dtype).contiguous(),
    family=FAMILY,
    doc="inclusive running product along dim, in a's dtype",
)


def _sort_meta(a: torch.Tensor, dim: int, descending: bool) -> tuple[torch.Tensor, torch.Tensor]:
    return (
        torch.empty(a.shape, dtype=a.dtype, device="meta"),
        torch.empty(a.shape, dtype=torch.int64, device="meta"),
    )


def _sort(a: torch.Tensor, dim: int, descending: bool) -> tuple[torch.Tensor, torch.Tensor]:
    values, indices = torch.sort(a, dim=dim, descending=descending, stable=True)
    return values.contiguous(), indices.contiguous()


define(
    "sort",
    "(Tensor a, int dim, bool descending) -> (Tensor values, Tensor indices)",
    _sort_meta,
    _sort,
    family=FAMILY,
    doc="stable sort along dim (NaN sorts as largest); values and their int64 source indices",
)
